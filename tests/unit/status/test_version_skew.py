"""The engine-version advisory conditions: LMCacheVersionSkew and EngineVersionBelowMinimum.

Rules (docs/api.md "Conditions", docs/decisions.md "Engine versions"): the server version
of a Managed LMCacheServer backend is its image tag, unknown for a digest or an
unparsable tag; each reporting engine pod's lmcache client is compared with it in
major.minor; a release older than the minimum the engine-contract tests prove is flagged;
neither gates Ready; a failed pod list keeps the prior condition; the spec's Offload-only
rules hold (EventsOnly and External never publish them).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from reconciler.status.compute import compute_status
from reconciler.status.engine_pods import InjectedPodsObservation, KernelCheckReport
from reconciler.status.events import transition_events
from reconciler.status.observed import Observed, WorkloadObservation
from reconciler.status.version_skew import (
    engine_version_below_minimum_condition,
    lmcache_version_skew_condition,
    releases_below_minimum,
)
from shared import constants as c
from shared import engine_versions as ev
from shared.api.models import CacheBackend
from shared.client_versions import client_skewed, major_minor, server_version_of_image
from shared.conditions import find
from tests.builders import NO_GATE, backend, condition_of, external, managed

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
SERVER = "lmcache/standalone:v0.4.7"


def report(pod: str, state: str = "ok", **versions: str) -> KernelCheckReport:
    return KernelCheckReport(pod, "report-only", state, versions=tuple(sorted(versions.items())))


def pods(*reports: KernelCheckReport) -> InjectedPodsObservation:
    return InjectedPodsObservation(kernel_checks=reports)


# ------------------------------------------------------------------ server version


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("lmcache/standalone:v0.4.7", "0.4.7"),
        ("lmcache/standalone:0.5.6", "0.5.6"),
        ("registry.local:5000/lmcache/standalone:v0.5.6", "0.5.6"),
        ("lmcache/standalone:v0.5.6-cu128", "0.5.6-cu128"),
        ("lmcache/standalone:v0.5", "0.5"),
    ],
)
def test_server_version_is_the_image_tag(image: str, version: str) -> None:
    assert server_version_of_image(image).version == version


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("lmcache/standalone@sha256:" + "a" * 64, "digest"),
        ("lmcache/standalone:v0.4.7@sha256:" + "a" * 64, "digest"),
        ("lmcache/standalone", "no tag"),
        ("registry.local:5000/lmcache/standalone", "no tag"),
        ("lmcache/standalone:latest", "not a release"),
        ("lmcache/standalone:nightly-2026", "not a release"),
        ("lmcache/standalone:v1", "not a release"),
    ],
)
def test_server_version_unknown_for_a_digest_or_unparsable_tag(image: str, why: str) -> None:
    """Never guessed: a digest (even beside a tag), no tag, or a tag that is no release."""
    server = server_version_of_image(image)
    assert server.version is None
    assert why in server.why


def test_major_minor_and_skew_rule() -> None:
    assert major_minor("0.4.7") == (0, 4)
    assert major_minor("0.5.6.post1+cu128") == (0, 5)
    assert major_minor("dev") is None
    assert client_skewed("0.4.1", "0.4.7") is False, "a patch release is not a skew"
    assert client_skewed("0.5.6", "0.4.7") is True
    assert client_skewed("1.4.7", "0.4.7") is True
    assert client_skewed("unknown", "0.4.7") is None


# ------------------------------------------------------------------ LMCacheVersionSkew


def test_matching_clients_are_aligned() -> None:
    got = lmcache_version_skew_condition(
        SERVER, pods(report("a", lmcache="0.4.7"), report("b", lmcache="0.4.2")), None
    )
    assert got is not None
    assert (got.type, got.status, got.reason) == (
        "LMCacheVersionSkew",
        "False",
        "VersionsAligned",
    )
    assert "a (lmcache 0.4.7)" in got.message
    assert "b (lmcache 0.4.2)" in got.message


def test_a_skewed_client_is_true_and_names_every_client_and_the_server() -> None:
    got = lmcache_version_skew_condition(
        SERVER,
        pods(report("a", lmcache="0.4.7"), report("b", "failed", lmcache="0.5.6")),
        None,
    )
    assert got is not None
    assert (got.status, got.reason) == ("True", "ClientServerVersionSkew")
    assert "lmcache 0.4.7" in got.message  # the server's
    assert "1/2" in got.message
    assert "b (lmcache 0.5.6)" in got.message
    assert "a (lmcache 0.4.7)" in got.message


def test_no_finished_check_is_absent() -> None:
    assert lmcache_version_skew_condition(SERVER, pods(), None) is None
    assert lmcache_version_skew_condition(SERVER, pods(report("a", "pending")), None) is None


def test_checks_without_a_client_version_are_unknown_not_aligned() -> None:
    """A verdict from before versions were reported, or an image without lmcache metadata
    (a client pip-installed at engine start), reports no client: Unknown, never a guess."""
    got = lmcache_version_skew_condition(
        SERVER, pods(report("a"), report("b", vllm="0.11.0")), None
    )
    assert got is not None
    assert (got.status, got.reason) == ("Unknown", "ClientVersionUnknown")
    assert "a, b" in got.message


def test_unreporting_pods_are_named_beside_a_verdict() -> None:
    got = lmcache_version_skew_condition(
        SERVER, pods(report("a", lmcache="0.4.7"), report("old")), None
    )
    assert got is not None
    assert got.reason == "VersionsAligned"
    assert "Not reported by old" in got.message


@pytest.mark.parametrize(
    "image", ["lmcache/standalone@sha256:" + "b" * 64, "lmcache/standalone:latest"]
)
def test_unknown_server_version_is_said_never_guessed(image: str) -> None:
    got = lmcache_version_skew_condition(image, pods(report("a", lmcache="0.5.6")), None)
    assert got is not None
    assert (got.status, got.reason) == ("Unknown", "ServerVersionUnknown")
    assert image in got.message
    assert "a (lmcache 0.5.6)" in got.message


def test_a_failed_pod_list_keeps_the_prior_condition() -> None:
    previous = {
        "type": "LMCacheVersionSkew",
        "status": "True",
        "reason": "ClientServerVersionSkew",
        "message": "before",
    }
    got = lmcache_version_skew_condition(SERVER, None, previous)
    assert got is not None
    assert (got.status, got.reason, got.message) == ("True", "ClientServerVersionSkew", "before")
    assert lmcache_version_skew_condition(SERVER, None, None) is None


# ------------------------------------------------------------------ EngineVersionBelowMinimum

MIN = ev.minimum_for(c.RUNTIME_VLLM, c.TYPE_LMCACHE, c.PROVIDER_LMCACHE_SERVER)


def test_releases_below_minimum_compares_vllm_and_lmcache_only() -> None:
    old = report("a", lmcache="0.4.1", vllm="0.10.2", torch="1.0")
    assert releases_below_minimum(old, MIN) == [
        ("vllm", "0.10.2", MIN["vllm"]),
        ("lmcache", "0.4.1", MIN["lmcache"]),
    ]
    assert releases_below_minimum(report("b", lmcache=MIN["lmcache"], vllm="0.33.0"), MIN) == []
    assert releases_below_minimum(report("c", lmcache="dev", vllm="main"), MIN) == []


def test_below_minimum_condition_states() -> None:
    args = (c.RUNTIME_VLLM, c.TYPE_LMCACHE, c.PROVIDER_LMCACHE_SERVER)
    below = engine_version_below_minimum_condition(
        *args, pods(report("a", vllm="0.33.0"), report("b", lmcache="0.4.1")), None
    )
    assert below is not None
    assert (below.type, below.status, below.reason) == (
        "EngineVersionBelowMinimum",
        "True",
        "ReleaseBelowMinimum",
    )
    assert f"b (lmcache 0.4.1 < {MIN['lmcache']})" in below.message
    ok = engine_version_below_minimum_condition(*args, pods(report("a", vllm="0.33.0")), None)
    assert ok is not None
    assert (ok.status, ok.reason) == ("False", "ReleasesAtMinimum")
    assert engine_version_below_minimum_condition(*args, pods(report("a")), None) is None
    prior = {"type": "EngineVersionBelowMinimum", "status": "True", "reason": "X", "message": ""}
    kept = engine_version_below_minimum_condition(*args, None, prior)
    assert kept is not None
    assert kept.reason == "X"


# ------------------------------------------------------------------ in compute_status


def ready_workload() -> WorkloadObservation:
    return WorkloadObservation(
        kind="Deployment",
        generation=1,
        observed_generation=1,
        spec_replicas=1,
        replicas=1,
        updated_replicas=1,
        available_replicas=1,
        ready_replicas=1,
        rollout_complete=True,
    )


def status_of(
    o: dict[str, Any], injected: InjectedPodsObservation | None, managed_workload: bool = True
) -> dict[str, Any]:
    observed = Observed(
        workload=ready_workload() if managed_workload else None,
        service_endpoint="cache-lmcache-server.team-a.svc:65432",
        injected_pods=injected,
    )
    return compute_status(CacheBackend.model_validate(o), o.get("status"), observed, T0).status


def managed_backend(image: str | None = None) -> dict[str, Any]:
    remote = managed(lmCacheServer={"image": image}) if image else managed()
    o = backend(remote=remote, annotations=NO_GATE)
    o["metadata"]["generation"] = 1
    return o


SKEWED = pods(report("a", lmcache="0.5.6", vllm="0.11.0"))
ALIGNED = pods(report("a", lmcache="0.4.7", vllm="0.11.0"))


def test_managed_lmcache_server_publishes_skew_and_ready_is_unchanged() -> None:
    aligned = status_of(managed_backend(), ALIGNED)
    skewed = status_of(managed_backend(), SKEWED)
    assert condition_of(aligned, "LMCacheVersionSkew") == ("False", "VersionsAligned")
    assert condition_of(skewed, "LMCacheVersionSkew") == ("True", "ClientServerVersionSkew")
    assert (
        condition_of(skewed, "Ready") == condition_of(aligned, "Ready") == ("True", "BackendReady")
    )
    assert condition_of(skewed, "Degraded") == condition_of(aligned, "Degraded")


def test_server_version_comes_from_the_overridden_image() -> None:
    st = status_of(managed_backend("lmcache/standalone:v0.5.6"), SKEWED)
    assert condition_of(st, "LMCacheVersionSkew") == ("False", "VersionsAligned")


def test_below_minimum_is_published_beside_and_never_gates_ready() -> None:
    st = status_of(managed_backend(), pods(report("a", lmcache="0.4.7", vllm="0.10.0")))
    assert condition_of(st, "EngineVersionBelowMinimum") == ("True", "ReleaseBelowMinimum")
    assert condition_of(st, "Ready") == ("True", "BackendReady")


def test_host_only_has_no_server_to_skew_but_checks_the_minimum() -> None:
    o = backend(annotations=NO_GATE)
    st = status_of(o, SKEWED, managed_workload=False)
    assert condition_of(st, "LMCacheVersionSkew") is None
    assert condition_of(st, "EngineVersionBelowMinimum") == ("False", "ReleasesAtMinimum")


@pytest.mark.parametrize(
    "o",
    [
        backend(integration={"mode": "EventsOnly"}, annotations=NO_GATE),
        backend(remote=external(c.PROVIDER_LMCACHE_SERVER, "lm.example:65432")),
    ],
    ids=["events-only", "external"],
)
def test_events_only_and_external_never_publish_them(o: dict[str, Any]) -> None:
    """The spec's Offload-managed-only rule: and a flip into those modes clears them."""
    before = managed_backend()
    before["status"] = status_of(before, SKEWED)
    assert condition_of(before["status"], "LMCacheVersionSkew") is not None
    o["status"] = before["status"]
    st = status_of(o, SKEWED, managed_workload=False)
    assert condition_of(st, "LMCacheVersionSkew") is None
    assert condition_of(st, "EngineVersionBelowMinimum") is None


def test_managed_provider_other_than_lmcache_server_has_no_skew_condition() -> None:
    o = backend(remote=managed(c.PROVIDER_MOONCAKE), annotations=NO_GATE)
    st = status_of(o, SKEWED)
    assert condition_of(st, "LMCacheVersionSkew") is None


def test_transient_pod_list_failure_keeps_both_conditions_and_emits_nothing() -> None:
    o = managed_backend()
    first = status_of(o, pods(report("a", lmcache="0.5.6", vllm="0.10.0")))
    o["status"] = first
    again = status_of(o, None)
    for type_ in ("LMCacheVersionSkew", "EngineVersionBelowMinimum"):
        assert find(again["conditions"], type_) == find(first["conditions"], type_)
    assert [e.reason for e in transition_events(first, again)] == []


def test_one_warning_event_on_entering_skew_not_on_every_reconcile() -> None:
    o = managed_backend()
    aligned = status_of(o, ALIGNED)
    o["status"] = aligned
    skewed = status_of(o, SKEWED)
    entered = [e for e in transition_events(aligned, skewed) if e.reason == "LMCacheVersionSkew"]
    assert len(entered) == 1
    assert entered[0].type == "Warning"
    assert "a (lmcache 0.5.6)" in entered[0].message
    o["status"] = skewed
    more = pods(report("a", lmcache="0.5.6"), report("b", lmcache="0.5.1"))
    still = status_of(o, more)
    assert "LMCacheVersionSkew" not in [e.reason for e in transition_events(skewed, still)]
    first_seen = [e.reason for e in transition_events(None, skewed)]
    assert first_seen.count("LMCacheVersionSkew") == 1


def test_one_warning_event_on_entering_below_minimum() -> None:
    o = managed_backend()
    st = status_of(o, pods(report("a", lmcache="0.4.7", vllm="0.10.0")))
    reasons = [e.reason for e in transition_events({}, st)]
    assert reasons.count("EngineVersionBelowMinimum") == 1
    assert [e.reason for e in transition_events(st, st)] == []
