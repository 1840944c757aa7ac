"""Spec "Mutating Pod webhook (engine wiring)": the pure decision core, wire_pod.

Also home of the pod/backend builders and the pod-validity assertion the adapter tests
share.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shared import constants as c
from shared.api.backend import read_backend_for_wiring
from shared.engine_versions import VLLM
from shared.json_diff import json_patch
from shared.pod_wiring import (
    OUTCOME_FAIL_OPEN,
    OUTCOME_INJECTED,
    OUTCOME_SKIPPED,
    SKIP_INJECT_TRUTHY,
    WiringResult,
    resolve_binding,
    wire_pod,
)
from tests.builders import (
    CTX,
    NO_SUB_CTX,
    NS,
    SUBSCRIBER_IMAGE,
    annotations_of,
    assert_decision_annotations_stripped,
    assert_idempotent,
    assert_valid_pod,
    containers_of,
    env_of,
    external,
    managed,
    stale_annotations,
)
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod
from tests.samples import SAMPLES_DIR, sample_backends, sample_target_release

# ------------------------------------------------------------------------ selection


def test_selection_first_matching_backend_by_name_wins() -> None:
    backends = [make_backend("zeta"), make_backend("alpha", uid="uid-alpha"), make_backend("mid")]
    result = wire_pod(make_pod(), backends, CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert result.backend == f"{NS}/alpha"
    assert annotations_of(result.pod)[c.ANNOTATION_INJECTED_BY] == f"{NS}/alpha"
    assert annotations_of(result.pod)[c.ANNOTATION_INJECTED_BY_UID] == "uid-alpha"


def test_selection_only_backends_of_the_pods_namespace() -> None:
    result = wire_pod(make_pod(), [make_backend(namespace="other")], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "no_match")


def test_selection_namespace_argument_overrides_pod_metadata() -> None:
    pod = make_pod(namespace="")
    result = wire_pod(pod, [make_backend()], CTX, namespace=NS)
    assert result.outcome == OUTCOME_INJECTED


def test_selection_every_match_label_must_be_on_the_pod() -> None:
    backend = make_backend(selector={"app": "engine", "tier": "gpu"})
    assert wire_pod(make_pod(), [backend], CTX).reason == "no_match"
    pod = make_pod(labels={"app": "engine", "tier": "gpu", "extra": "x"})
    assert wire_pod(pod, [backend], CTX).outcome == OUTCOME_INJECTED


@pytest.mark.parametrize("selector", [None, {}, {"matchLabels": {}}, {"matchLabels": None}])
def test_selection_nil_or_empty_selector_never_matches(selector: Any) -> None:
    backend = make_backend()
    if selector is None:
        del backend["spec"]["engineSelector"]
    else:
        backend["spec"]["engineSelector"] = selector
    result = wire_pod(make_pod(), [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "no_match")


def test_selection_skips_unclaiming_backend_and_takes_next_match() -> None:
    unclaiming = make_backend("aaa")
    unclaiming["spec"]["engineSelector"] = {}
    result = wire_pod(make_pod(), [unclaiming, make_backend("bbb")], CTX)
    assert result.backend == f"{NS}/bbb"


# --------------------------------------------------------------- fail-open paths


def test_fail_open_no_match_strips_stale_annotations() -> None:
    pod = make_pod(labels={"app": "other"}, annotations=stale_annotations())
    result = wire_pod(pod, [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "no_match")
    assert_decision_annotations_stripped(result.pod)
    assert result.pod["spec"] == pod["spec"]


def test_fail_open_no_match_without_annotations_leaves_pod_identical() -> None:
    pod = make_pod(labels={"app": "other"})
    result = wire_pod(pod, [make_backend()], CTX)
    assert json_patch(pod, result.pod) == []


def test_fail_open_missing_managed_endpoint() -> None:
    backend = make_backend(remote=managed())
    pod = make_pod(annotations=stale_annotations())
    result = wire_pod(pod, [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "missing_endpoint")
    assert result.pod["spec"] == pod["spec"]
    assert_decision_annotations_stripped(result.pod)


def test_fail_open_whitespace_managed_endpoint() -> None:
    backend = make_backend(remote=managed(), status_endpoint="   ")
    assert wire_pod(make_pod(), [backend], CTX).reason == "missing_endpoint"


@pytest.mark.parametrize(
    "status_endpoint",
    ["cache-lmcache-server.team-a.svc:65432", " evil.attacker.example:65432 ", "s:1"],
)
def test_binding_managed_uses_the_service_we_own_whatever_status_says(
    status_endpoint: str,
) -> None:
    """Rule "Managed endpoints come from what we own": the engines dial the Service the
    reconciler renders for the backend; a published status.endpoint only says it is up."""
    backend = make_backend(remote=managed(), status_endpoint=status_endpoint)
    result = wire_pod(make_pod(), [backend], CTX)
    engine = containers_of(result.pod)["vllm"]
    assert env_of(engine)["LMCACHE_REMOTE_URL"] == "lm://cache-lmcache-server.team-a.svc:65432"


def test_binding_managed_redis_uses_the_service_we_own() -> None:
    """The same for a managed Redis, with its password Secret."""
    backend = make_backend(
        runtime="SGLang", remote=managed("Redis"), status_endpoint="evil.example.com:6379"
    )
    binding = resolve_binding(read_backend_for_wiring(backend).model)
    assert binding is not None
    assert binding.endpoint == "cache-redis.team-a.svc:6379"
    assert binding.password_secret == "cache-redis-auth"


def test_binding_external_uses_trimmed_spec_endpoint_never_status() -> None:
    backend = make_backend(
        remote=external("LMCacheServer", "  lm://ext.example.com:65432 "),
        status_endpoint="stale.example.com:1",
    )
    result = wire_pod(make_pod(), [backend], CTX)
    engine = containers_of(result.pod)["vllm"]
    assert env_of(engine)["LMCACHE_REMOTE_URL"] == "lm://ext.example.com:65432"


def test_fail_open_external_endpoint_empty() -> None:
    backend = make_backend(remote=external("LMCacheServer", "  "), status_endpoint="x:1")
    assert wire_pod(make_pod(), [backend], CTX).reason == "missing_endpoint"


@pytest.mark.parametrize(
    ("provider", "endpoint"),
    [
        ("Redis", "lm://redis:6379"),
        ("LMCacheServer", "host-without-port"),
        ("Mooncake", "lm://m:1"),
    ],
)
def test_fail_open_external_endpoint_fails_provider_shape(provider: str, endpoint: str) -> None:
    runtime = "SGLang" if provider == "Redis" else "VLLM"
    backend = make_backend(runtime=runtime, remote=external(provider, endpoint))
    pod = make_pod(make_container("sglang") if runtime == "SGLang" else make_container())
    result = wire_pod(pod, [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "invalid_endpoint")
    assert result.pod["spec"] == pod["spec"]


def test_fail_open_binding_not_supported() -> None:
    # vLLM's LMCache connector has no RESP wire.
    backend = make_backend(remote=managed("Redis"), status_endpoint="redis.team-a.svc:6379")
    result = wire_pod(make_pod(annotations=stale_annotations()), [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "binding_not_supported")
    assert_decision_annotations_stripped(result.pod)


def test_fail_open_hicache_with_remote_binding_not_supported() -> None:
    backend = make_backend(
        runtime="SGLang",
        type_="SGLangHiCache",
        hiCache={"ratio": "2"},
        remote=managed("Redis"),
        status_endpoint="redis:6379",
    )
    result = wire_pod(make_pod(make_container("sglang")), [backend], CTX)
    assert result.reason == "binding_not_supported"


def test_fail_open_no_adapter_for_pair() -> None:
    backend = make_backend(type_="SGLangHiCache", hiCache={"ratio": "2"})  # VLLM + HiCache
    result = wire_pod(make_pod(annotations=stale_annotations()), [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "no_adapter")
    assert "VLLM/LMCache" in result.message
    assert_decision_annotations_stripped(result.pod)


def test_fail_open_invalid_backend() -> None:
    backend = make_backend()
    backend["spec"]["runtime"] = "TensorRT"
    result = wire_pod(make_pod(annotations=stale_annotations()), [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "invalid_backend")
    assert result.backend == f"{NS}/cache"
    assert_decision_annotations_stripped(result.pod)


def test_status_fields_other_than_endpoint_never_invalidate_a_backend() -> None:
    backend = make_backend(remote=managed(), status_endpoint="s:65432")
    backend["status"]["conditions"] = [{"type": "Ready"}]  # partial, as hand-written in a file
    backend["status"]["somethingNewer"] = {"x": 1}
    assert wire_pod(make_pod(), [backend], CTX).outcome == OUTCOME_INJECTED


def test_fail_open_remote_storage_without_ownership_is_invalid_backend() -> None:
    backend = make_backend(remote={"provider": "LMCacheServer"})
    assert wire_pod(make_pod(), [backend], CTX).reason == "invalid_backend"


def test_fail_open_adapter_rejected() -> None:
    pod = make_pod(
        make_container("a", image="x"),
        make_container("b", image="y"),
        annotations=stale_annotations(),
    )
    result = wire_pod(pod, [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "adapter_rejected")
    assert result.pod["spec"] == pod["spec"]
    assert_decision_annotations_stripped(result.pod)


def test_fail_open_adapter_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter

    def boom(*_: Any, **__: Any) -> dict[str, Any]:
        raise KeyError("bug")

    monkeypatch.setattr(VLLMLMCacheAdapter, "inject", boom)
    result = wire_pod(make_pod(annotations=stale_annotations()), [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "adapter_error")
    assert_decision_annotations_stripped(result.pod)


@pytest.mark.parametrize(
    "pod", [{"metadata": {}, "spec": {}}, {"metadata": {}, "spec": {"containers": []}}]
)
def test_fail_open_invalid_pod(pod: dict[str, Any]) -> None:
    result = wire_pod(pod, [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "invalid_pod")


def test_fail_open_when_wiring_would_make_the_pod_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter

    def bad(self: Any, pod: dict[str, Any], *_: Any) -> dict[str, Any]:
        out = copy.deepcopy(pod)
        out["spec"]["containers"].append(dict(out["spec"]["containers"][0]))
        return out

    monkeypatch.setattr(VLLMLMCacheAdapter, "inject", bad)
    result = wire_pod(make_pod(), [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "invalid_result")
    assert "duplicated" in result.message


def test_preexisting_pod_problems_are_not_blamed_on_wiring() -> None:
    engine = make_container(env=[{"name": "1BAD", "value": "x"}])
    result = wire_pod(make_pod(engine), [make_backend()], CTX)
    assert result.outcome == OUTCOME_INJECTED


# ---------------------------------------------------------------- skip-inject


@pytest.mark.parametrize("value", ["true", "TRUE", " True ", "1", "yes", "on", "On"])
def test_skip_inject_annotation_truthy_values_skip(value: str) -> None:
    annotations = {
        c.ANNOTATION_SKIP_INJECT: value,
        c.ANNOTATION_INJECTED_BY: f"{NS}/cache",
        c.ANNOTATION_INJECTED_BY_UID: "uid",
        "team/keep": "me",
    }
    pod = make_pod(annotations=annotations)
    result = wire_pod(pod, [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_SKIPPED, "skip_inject_annotation")
    got = annotations_of(result.pod)
    assert got[c.ANNOTATION_INJECT_SKIPPED] == c.INJECT_SKIPPED_VALUE
    assert c.ANNOTATION_INJECTED_BY not in got
    assert c.ANNOTATION_INJECTED_BY_UID not in got
    assert got[c.ANNOTATION_SKIP_INJECT] == value
    assert got["team/keep"] == "me"
    assert result.pod["spec"] == pod["spec"]


def test_skip_inject_truthy_set_is_documented() -> None:
    assert {"true", "t", "1", "yes", "on"} == SKIP_INJECT_TRUTHY


@pytest.mark.parametrize("value", ["false", "0", "no", "off", "", "maybe"])
def test_skip_inject_annotation_falsy_values_wire(value: str) -> None:
    pod = make_pod(annotations={c.ANNOTATION_SKIP_INJECT: value})
    result = wire_pod(pod, [make_backend()], CTX)
    assert result.outcome == OUTCOME_INJECTED


def test_skip_inject_applies_even_without_a_matching_backend() -> None:
    pod = make_pod(annotations={c.ANNOTATION_SKIP_INJECT: "true"})
    assert wire_pod(pod, [], CTX).outcome == OUTCOME_SKIPPED


def test_skip_inject_with_existing_marker_is_converged() -> None:
    pod = make_pod(
        annotations={
            c.ANNOTATION_SKIP_INJECT: "true",
            c.ANNOTATION_INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
        }
    )
    result = wire_pod(pod, [make_backend()], CTX)
    assert json_patch(pod, result.pod) == []


# ------------------------------------------------------------------ annotations


def test_injected_stamps_injected_by_and_uid_and_clears_inject_skipped() -> None:
    pod = make_pod(annotations={c.ANNOTATION_INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE})
    result = wire_pod(pod, [make_backend(uid="the-uid")], CTX)
    got = annotations_of(result.pod)
    assert got[c.ANNOTATION_INJECTED_BY] == f"{NS}/cache"
    assert got[c.ANNOTATION_INJECTED_BY_UID] == "the-uid"
    assert c.ANNOTATION_INJECT_SKIPPED not in got


def test_injected_without_backend_uid_stamps_an_empty_uid_over_a_stale_one() -> None:
    # Spec: "Stamps TWO annotations on every successfully mutated pod"; a backend without
    # metadata.uid (a YAML file) gives an empty one, never the forged value.
    pod = make_pod(annotations={c.ANNOTATION_INJECTED_BY_UID: "forged"})
    result = wire_pod(pod, [make_backend(uid=None)], CTX)
    assert annotations_of(result.pod)[c.ANNOTATION_INJECTED_BY_UID] == ""
    assert annotations_of(result.pod)[c.ANNOTATION_INJECTED_BY] == f"{NS}/cache"


def labels_of(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("labels") or {})


def test_injected_by_uid_label_beside_the_annotations_selects_the_backends_pods() -> None:
    # Not in the spec (docs/decisions.md): the uid as a label too, so the reconciler can
    # list a backend's injected pods with a label selector; the annotations are unchanged.
    uid = "0f6c1a54-3c2e-4d8e-9d1f-6a1b2c3d4e5f"
    pod = make_pod(labels={"app": "engine", "team": "a"})
    result = wire_pod(pod, [make_backend(uid=uid)], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert labels_of(result.pod) == {
        "app": "engine",
        "team": "a",
        c.LABEL_INJECTED_BY_UID: uid,
        c.LABEL_METRICS: c.LABEL_METRICS_ENGINE,
    }
    got = annotations_of(result.pod)
    assert (got[c.ANNOTATION_INJECTED_BY], got[c.ANNOTATION_INJECTED_BY_UID]) == (
        f"{NS}/cache",
        uid,
    )


def test_injected_by_uid_label_replaces_a_stale_label_from_the_template() -> None:
    pod = make_pod(labels={"app": "engine", c.LABEL_INJECTED_BY_UID: "uid-of-a-deleted-cr"})
    result = wire_pod(pod, [make_backend(uid="live-uid")], CTX)
    assert labels_of(result.pod)[c.LABEL_INJECTED_BY_UID] == "live-uid"


@pytest.mark.parametrize("uid", [None, "", "not a label value", "x" * 64])
def test_injected_by_uid_label_absent_when_the_uid_is_no_label_value(uid: str | None) -> None:
    # A backend file without metadata.uid (or a hand-written one): the annotations are
    # stamped as the spec says, the label is left off (and a stale one removed).
    pod = make_pod(labels={"app": "engine", c.LABEL_INJECTED_BY_UID: "stale"})
    result = wire_pod(pod, [make_backend(uid=uid)], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert c.LABEL_INJECTED_BY_UID not in labels_of(result.pod)
    assert annotations_of(result.pod)[c.ANNOTATION_INJECTED_BY_UID] == (uid or "")


def test_fail_open_and_skip_strip_a_stale_injected_by_uid_label() -> None:
    stale = {"app": "engine", c.LABEL_INJECTED_BY_UID: "forged"}
    no_match = wire_pod(make_pod(labels={**stale, "app": "other"}), [make_backend()], CTX)
    assert (no_match.outcome, labels_of(no_match.pod)) == (OUTCOME_FAIL_OPEN, {"app": "other"})
    skipped = wire_pod(
        make_pod(labels=stale, annotations={c.ANNOTATION_SKIP_INJECT: "true"}), [], CTX
    )
    assert (skipped.outcome, labels_of(skipped.pod)) == (OUTCOME_SKIPPED, {"app": "engine"})


def test_kernel_check_mode_recorded_when_check_injected() -> None:
    backend = make_backend(annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK: "strict"})
    result = wire_pod(make_pod(), [backend], CTX)
    assert annotations_of(result.pod)[c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE] == "strict"


def test_kernel_check_mode_not_recorded_without_check_and_forged_value_dropped() -> None:
    pod = make_pod(annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE: "strict"})  # CPU engine
    result = wire_pod(pod, [make_backend()], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE not in annotations_of(result.pod)


def test_kernel_check_auto_on_gpu_engine_records_report_only() -> None:
    engine = make_container(resources={"limits": {"nvidia.com/gpu": "1"}})
    result = wire_pod(make_pod(engine), [make_backend()], CTX)
    assert annotations_of(result.pod)[c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE] == "report-only"


# ------------------------------------------------------------------ events-only


def events_only_backend(**kw: Any) -> dict[str, Any]:
    return make_backend(integration={"mode": "EventsOnly"}, **kw)


def test_events_only_injects_only_the_subscriber() -> None:
    engine = make_container(resources={"limits": {"nvidia.com/gpu": "1"}})
    backend = events_only_backend(lmCache={"chunkSizeTokens": 512})
    pod = make_pod(engine)
    result = wire_pod(pod, [backend], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_INJECTED, "events_only")
    assert containers_of(result.pod)["vllm"] == engine
    assert "initContainers" not in result.pod["spec"]  # no kernel check either
    sub = containers_of(result.pod)["kvevent-subscriber"]
    assert "--ignore-block-removed=true" not in sub["args"]
    assert annotations_of(result.pod)[c.ANNOTATION_INJECTED_BY] == f"{NS}/cache"
    assert_valid_pod(result.pod)
    assert_idempotent(result, [backend], CTX)


def test_events_only_needs_no_endpoint() -> None:
    backend = events_only_backend()
    assert "status" not in backend
    assert wire_pod(make_pod(), [backend], CTX).outcome == OUTCOME_INJECTED


def test_events_only_without_subscriber_image_leaves_pod_untouched() -> None:
    pod = make_pod()
    result = wire_pod(pod, [events_only_backend()], NO_SUB_CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "events_only_no_subscriber")
    assert json_patch(pod, result.pod) == []


def test_events_only_without_model_id_leaves_pod_untouched_and_strips_stale() -> None:
    pod = make_pod(annotations=stale_annotations())
    result = wire_pod(pod, [events_only_backend(model_id=None)], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "events_only_no_subscriber")
    assert result.pod["spec"] == pod["spec"]
    assert_decision_annotations_stripped(result.pod)


def test_events_only_sglang_uses_sglang_hash_scheme() -> None:
    backend = events_only_backend(runtime="SGLang")
    result = wire_pod(make_pod(make_container("server", image="lmsysorg/sglang")), [backend], CTX)
    sub = containers_of(result.pod)["kvevent-subscriber"]
    assert "--hash-scheme=sglang" in sub["args"]
    assert "initContainers" not in result.pod["spec"]


# -------------------------------------------------------------------- subscriber


def test_offload_appends_subscriber_when_image_and_model_id_set() -> None:
    result = wire_pod(make_pod(), [make_backend()], CTX)
    sub = containers_of(result.pod)["kvevent-subscriber"]
    assert sub["image"] == SUBSCRIBER_IMAGE
    assert "--ignore-block-removed=true" in sub["args"]
    assert "--server=icache:50051" in sub["args"]


def test_offload_without_subscriber_image_still_wires_connector() -> None:
    result = wire_pod(make_pod(), [make_backend()], NO_SUB_CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert "kvevent-subscriber" not in containers_of(result.pod)


def test_subscriber_name_on_an_init_container_fails_open() -> None:
    pod = make_pod(initContainers=[make_container("kvevent-subscriber", image="busybox")])
    result = wire_pod(pod, [make_backend()], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "subscriber_rejected")


# -------------------------------------------------------------------- mooncake


def mooncake_backend(
    host_network: bool | None, status: str | None = "mc-master.team-a.svc:50051"
) -> dict[str, Any]:
    integration = {} if host_network is None else {"engineHostNetwork": host_network}
    return make_backend(remote=managed("Mooncake"), status_endpoint=status, integration=integration)


def test_mooncake_engine_host_network_set_with_connector() -> None:
    result = wire_pod(make_pod(), [mooncake_backend(True)], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert result.pod["spec"]["hostNetwork"] is True
    assert result.pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    engine = containers_of(result.pod)["vllm"]
    assert env_of(engine)["LMCACHE_REMOTE_URL"] == "mooncakestore://cache-mooncake.team-a.svc:50051"
    assert_idempotent(result, [mooncake_backend(True)], CTX)


def test_mooncake_without_engine_host_network_stays_on_pod_network() -> None:
    result = wire_pod(make_pod(), [mooncake_backend(None)], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert "hostNetwork" not in result.pod["spec"]
    assert "dnsPolicy" not in result.pod["spec"]


def test_mooncake_host_network_never_granted_without_connector() -> None:
    pod = make_pod()
    result = wire_pod(pod, [mooncake_backend(True, status=None)], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "missing_endpoint")
    assert "hostNetwork" not in result.pod["spec"]


def test_engine_host_network_ignored_for_non_mooncake_binding() -> None:
    backend = make_backend(
        remote=managed(), status_endpoint="lm:65432", integration={"engineHostNetwork": True}
    )
    result = wire_pod(make_pod(), [backend], CTX)
    assert "hostNetwork" not in result.pod["spec"]


def _extra_config(result: WiringResult) -> dict[str, Any]:
    env = env_of(containers_of(result.pod)["vllm"])
    parsed: dict[str, Any] = json.loads(env["LMCACHE_EXTRA_CONFIG"])
    return parsed


def test_mooncake_external_master_address_is_the_operators_endpoint() -> None:
    """LMCache's Mooncake connector reads the master from extra_config, not the URL."""
    backend = make_backend(remote=external("Mooncake", "mooncakestore://mc.infra.svc:50051"))
    result = wire_pod(make_pod(), [backend], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert _extra_config(result)["master_server_address"] == "mc.infra.svc:50051"
    assert_idempotent(result, [backend], CTX)


def test_mooncake_extra_config_override_is_merged_and_readmission_is_empty() -> None:
    """engineOverrides.env LMCACHE_EXTRA_CONFIG: the operator's transfer-engine keys win,
    the master address is the binding's; re-admitting the wired pod is an empty patch."""
    override = {
        "name": "LMCACHE_EXTRA_CONFIG",
        "value": '{"protocol":"rdma","device_name":"mlx5_0","master_server_address":"x:1"}',
    }
    backend = mooncake_backend(True)
    backend["spec"]["integration"]["engineOverrides"] = {"env": [override]}
    result = wire_pod(make_pod(), [backend], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert _extra_config(result) == {
        "device_name": "mlx5_0",
        "local_hostname": "$(INFERENCECACHE_POD_IP)",
        "master_server_address": "cache-mooncake.team-a.svc:50051",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "rdma",
    }
    assert_idempotent(result, [backend], CTX)


def test_mooncake_extra_config_can_be_suppressed() -> None:
    """suppressEnv still applies: an operator who sets the transfer engine up by
    MOONCAKE_CONFIG_PATH (which LMCache reads first) takes the injected object out."""
    backend = mooncake_backend(True)
    backend["spec"]["integration"]["engineOverrides"] = {"suppressEnv": ["LMCACHE_EXTRA_CONFIG"]}
    result = wire_pod(make_pod(), [backend], CTX)
    assert "LMCACHE_EXTRA_CONFIG" not in env_of(containers_of(result.pod)["vllm"])
    assert_idempotent(result, [backend], CTX)


def test_mooncake_extra_config_that_cannot_be_merged_fails_open() -> None:
    pod = make_pod(make_container(env=[{"name": "LMCACHE_EXTRA_CONFIG", "value": "[]"}]))
    result = wire_pod(pod, [mooncake_backend(True)], CTX)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, "adapter_rejected")
    assert "LMCACHE_EXTRA_CONFIG" in result.message
    assert "hostNetwork" not in result.pod["spec"]


def test_vllm_use_v1_left_out_under_an_override_fail_on_environ_validation() -> None:
    """vLLM 0.33.0 raises "Unknown vLLM environment variable detected" at startup for
    VLLM_USE_V1 under --fail-on-environ-validation; the override appends the flag and
    the re-admitted pod (which now carries it itself) is an empty patch."""
    backend = make_backend(
        integration={"engineOverrides": {"args": ["--fail-on-environ-validation"]}}
    )
    result = wire_pod(make_pod(), [backend], CTX)
    engine = containers_of(result.pod)["vllm"]
    assert "--fail-on-environ-validation" in engine["args"]
    assert "VLLM_USE_V1" not in env_of(engine)
    assert_idempotent(result, [backend], CTX)


# -------------------------------------------------------------------- overrides


def test_engine_overrides_are_applied_by_the_webhook() -> None:
    backend = make_backend(
        integration={
            "engineOverrides": {
                "args": ["--max-model-len 4096"],
                "env": [{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}],
                "suppressEnv": ["LMCACHE_LOCAL_CPU"],
            }
        }
    )
    result = wire_pod(make_pod(), [backend], CTX)
    engine = containers_of(result.pod)["vllm"]
    assert engine["args"][-2:] == ["--max-model-len", "4096"]
    assert env_of(engine)["LMCACHE_CHUNK_SIZE"] == "512"
    assert "LMCACHE_LOCAL_CPU" not in env_of(engine)
    assert_idempotent(result, [backend], CTX)


# ------------------------------------------------------------------ idempotency


def every_configuration() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    return [
        ("vllm-host-only", make_backend(), make_pod(make_container(resources=gpu))),
        ("vllm-lm", make_backend(remote=managed(), status_endpoint="s:65432"), make_pod()),
        ("vllm-mooncake-hostnet", mooncake_backend(True), make_pod()),
        (
            "vllm-strict",
            make_backend(annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK: "strict"}),
            make_pod(),
        ),
        (
            "sglang-lmcache-redis",
            make_backend(runtime="SGLang", remote=managed("Redis"), status_endpoint="r:6379"),
            make_pod(make_container("sglang", image="lmsysorg/sglang:v0.5")),
        ),
        (
            "sglang-lmcache-host-only-reused-shm",
            make_backend(runtime="SGLang"),
            make_pod(
                make_container(
                    "sglang",
                    image="lmsysorg/sglang:v0.5",
                    volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}],
                ),
                volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            ),
        ),
        (
            "sglang-hicache",
            make_backend(
                runtime="SGLang",
                type_="SGLangHiCache",
                hiCache={"sizeGB": 64, "writePolicy": "write_through"},
            ),
            make_pod(
                make_container("sglang", image="lmsysorg/sglang:v0.5", args=["--hicache-size=64"])
            ),
        ),
        ("events-only", events_only_backend(), make_pod()),
    ]


@pytest.mark.parametrize(
    ("backend", "pod"),
    [pytest.param(b, p, id=name) for name, b, p in every_configuration()],
)
def test_idempotency_re_admission_of_wired_pod_is_an_empty_patch(
    backend: dict[str, Any], pod: dict[str, Any]
) -> None:
    result = wire_pod(pod, [backend], CTX)
    assert result.outcome == OUTCOME_INJECTED, result.message
    assert_valid_pod(result.pod)
    assert_idempotent(result, [backend], CTX)


@pytest.mark.parametrize(
    ("backend", "pod"),
    [pytest.param(b, p, id=name) for name, b, p in every_configuration()],
)
def test_wiring_never_mutates_its_inputs(backend: dict[str, Any], pod: dict[str, Any]) -> None:
    pod_before, backend_before = copy.deepcopy(pod), copy.deepcopy(backend)
    wire_pod(pod, [backend], CTX)
    assert pod == pod_before
    assert backend == backend_before


def test_idempotency_survives_api_server_defaulting() -> None:
    """A persisted pod carries fields the API server defaulted or added on our sidecars."""
    backend = make_backend(runtime="SGLang", annotations={})
    result = wire_pod(make_pod(make_container("sglang", image="lmsysorg/sglang")), [backend], CTX)
    persisted = copy.deepcopy(result.pod)
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    persisted["spec"]["volumes"].append({"name": "kube-api-access-x", "projected": {"sources": []}})
    for ct in persisted["spec"]["containers"] + persisted["spec"]["initContainers"]:
        ct.setdefault("imagePullPolicy", "IfNotPresent")
        ct.setdefault("terminationMessagePath", "/dev/termination-log")
        ct.setdefault("terminationMessagePolicy", "File")
        # The ServiceAccount admission plugin mounts the token into every container.
        ct.setdefault("volumeMounts", []).append(
            {"name": "kube-api-access-x", "mountPath": token, "readOnly": True}
        )
    again = wire_pod(persisted, [backend], CTX)
    assert json_patch(persisted, again.pod) == []


@pytest.mark.parametrize(
    ("name", "doc"), sample_backends(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_shipped_sample_wires_or_fails_open_cleanly(name: str, doc: dict[str, Any]) -> None:
    backend = copy.deepcopy(doc)
    backend.setdefault("metadata", {})["namespace"] = NS
    labels = dict((backend["spec"].get("engineSelector") or {}).get("matchLabels") or {})
    if not labels:
        pytest.skip("sample claims no pods")
    runtime = backend["spec"]["runtime"]
    # The vLLM release the sample's own Deployment names (vLLM's own offloading needs
    # 0.33.0 or later; tests.samples.sample_target_release).
    vllm = sample_target_release(SAMPLES_DIR / name, VLLM)
    container = (
        make_container("sglang", "lmsysorg/sglang")
        if runtime == "SGLang"
        else make_container(image=f"vllm/vllm-openai:v{vllm}")
    )
    pod = make_pod(container, labels=labels)
    result = wire_pod(pod, [backend], CTX)
    assert result.outcome in (OUTCOME_INJECTED, OUTCOME_FAIL_OPEN)
    if result.outcome == OUTCOME_FAIL_OPEN:
        # Only a managed backend without a published endpoint may fail open.
        assert result.reason == "missing_endpoint", result.message
    else:
        assert_valid_pod(result.pod)
        assert_idempotent(result, [backend], CTX)
