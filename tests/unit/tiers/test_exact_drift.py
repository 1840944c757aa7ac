"""Exact drift of a NetworkPolicy (docs/decisions.md, "Exact drift repair of
NetworkPolicies"): peers, ports, selectors and policy types are what we render, keys
someone added inside them included; the API server's defaults are not drift."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconciler.steps.diff import needs_apply
from reconciler.steps.exact_drift import spec_exactly_equal, spec_replacement
from shared import constants as c
from shared.api.models import CacheBackend
from shared.storage_providers.render import render_managed_objects
from tests.builders import status_backend


def rendered_policy() -> dict[str, Any]:
    spec = {
        "runtime": "SGLang",
        "engineSelector": {"matchLabels": {"app": "sglang"}},
        "remoteStorage": {"provider": c.PROVIDER_REDIS, "ownership": c.OWNERSHIP_MANAGED},
    }
    cb = CacheBackend.model_validate(status_backend(spec, uid="u-1"))
    (policy,) = [o for o in render_managed_objects(cb) if o["kind"] == "NetworkPolicy"]
    return policy


def test_the_api_servers_defaults_are_not_drift() -> None:
    desired = rendered_policy()
    live = copy.deepcopy(desired)
    for rule in live["spec"]["ingress"]:
        for port in rule["ports"]:
            port.pop("protocol")  # defaulted to TCP by the server
    live["spec"]["egress"] = []
    assert spec_exactly_equal(desired, live)


def _add_match_expressions(spec: dict[str, Any]) -> None:
    spec["podSelector"]["matchExpressions"] = [
        {"key": "nothing", "operator": "In", "values": ["x"]}
    ]


def _add_peer(spec: dict[str, Any]) -> None:
    spec["ingress"][0]["from"].append({"podSelector": {}})


def _open_namespaces(spec: dict[str, Any]) -> None:
    spec["ingress"][0]["from"][0]["namespaceSelector"] = {}


def _add_port(spec: dict[str, Any]) -> None:
    spec["ingress"][0]["ports"].append({"protocol": "TCP", "port": 22})


def _add_end_port(spec: dict[str, Any]) -> None:
    spec["ingress"][0]["ports"][0]["endPort"] = 65535


def _drop_policy_type(spec: dict[str, Any]) -> None:
    spec["policyTypes"] = ["Egress"]


def _add_rule(spec: dict[str, Any]) -> None:
    spec["ingress"].append({})


def _peer_expressions(spec: dict[str, Any]) -> None:
    spec["ingress"][0]["from"][0]["podSelector"]["matchExpressions"] = [
        {"key": "app", "operator": "Exists"}
    ]


@pytest.mark.parametrize(
    "drift",
    [
        _add_match_expressions,
        _add_peer,
        _open_namespaces,
        _add_port,
        _add_end_port,
        _drop_policy_type,
        _add_rule,
        _peer_expressions,
    ],
)
def test_a_key_added_inside_what_we_set_is_drift(drift: Any) -> None:
    """The subset diff misses an added key (server-side apply would leave it too);
    the exact comparison does not."""
    desired = rendered_policy()
    live = copy.deepcopy(desired)
    drift(live["spec"])
    assert not spec_exactly_equal(desired, live)


def test_a_key_added_inside_the_pod_selector_escapes_the_subset_diff() -> None:
    """Why the exact comparison exists: needs_apply alone sees no drift here."""
    desired = rendered_policy()
    live = copy.deepcopy(desired)
    _add_match_expressions(live["spec"])
    assert not needs_apply(desired, live)
    assert not spec_exactly_equal(desired, live)


def test_other_kinds_are_left_to_the_subset_diff() -> None:
    assert spec_exactly_equal({"kind": "Deployment", "spec": {"a": 1}}, {"spec": {"a": 2}})


def test_the_replacement_is_of_exactly_the_object_read() -> None:
    desired = rendered_policy()
    assert spec_replacement(desired, "uid-7") == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-7"},
        {"op": "replace", "path": "/spec", "value": desired["spec"]},
    ]
