"""Every container the Pod webhook adds passes Pod Security "restricted" and
carries requests for a namespace ResourceQuota; the engine's own containers are untouched.

The real API server (PodSecurity + ResourceQuota admission) checks the same pods in
tests/integration/webhook/test_pod_security_server.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared import constants as c
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from shared.runtime_adapters import security
from shared.runtime_adapters.base import InjectContext
from tests.builders import assert_idempotent, assert_valid_pod
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

CTX = InjectContext(
    kvevent_subscriber_image="ghcr.io/inference-cache/kvevent-subscriber:v1",
    server_address="inference-cache-server:50051",
)
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
GPU = {"limits": {"nvidia.com/gpu": "1"}}
ENGINE_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _vllm_pod(engine_sc: dict[str, Any] | None = ENGINE_SC, **spec: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {"resources": GPU}
    if engine_sc is not None:
        extra["securityContext"] = copy.deepcopy(engine_sc)
    return make_pod(make_container(**extra), **spec)


def _sglang_pod(engine_sc: dict[str, Any] | None = ENGINE_SC, **spec: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if engine_sc is not None:
        extra["securityContext"] = copy.deepcopy(engine_sc)
    return make_pod(
        make_container("sglang", image="lmsysorg/sglang:v0.5.13-cu129", **extra), **spec
    )


def _wire(pod: dict[str, Any], runtime: str = "VLLM", **backend: Any) -> dict[str, Any]:
    backends = [make_backend(runtime=runtime, **backend)]
    result = wire_pod(pod, backends, CTX)
    assert result.outcome == OUTCOME_INJECTED, result
    assert_idempotent(result, backends, CTX)
    assert_valid_pod(result.pod)
    return result.pod


def _added(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The containers and init containers the webhook added, by name."""
    names = {
        ct["name"]
        for field in ("containers", "initContainers")
        for ct in before["spec"].get(field) or []
    }
    return {
        ct["name"]: ct
        for field in ("containers", "initContainers")
        for ct in after["spec"].get(field) or []
        if ct["name"] not in names
    }


def test_every_added_vllm_container_is_restricted_and_has_requests() -> None:
    """Subscriber + kernel check on a restricted-compliant vLLM engine pod."""
    pod = _vllm_pod()
    wired = _wire(pod)
    added = _added(pod, wired)
    assert set(added) == {"kvevent-subscriber", "lmcache-kernel-check"}
    for ct in added.values():
        sc = ct["securityContext"]
        assert {k: sc[k] for k in RESTRICTED} == RESTRICTED, ct["name"]
        assert sc["runAsNonRoot"] is True, ct["name"]
        assert ct["resources"]["requests"]["cpu"]
        assert ct["resources"]["requests"]["memory"]
    # The subscriber runs our image; the check takes the engine's identity.
    assert added["kvevent-subscriber"]["securityContext"] == {**RESTRICTED, "runAsNonRoot": True}
    assert added["lmcache-kernel-check"]["securityContext"] == {
        **RESTRICTED,
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
    }
    assert added["kvevent-subscriber"]["resources"] == security.SUBSCRIBER_RESOURCES


def test_kernel_check_of_an_engine_without_resources_has_small_requests() -> None:
    """Rule check_resources: where the engine declares no cpu or memory, the check
    keeps small requests (a quota or LimitRange that demands requests is satisfied)."""
    check = _added(_vllm_pod(), _wire(_vllm_pod()))["lmcache-kernel-check"]
    assert check["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}}


def test_mp_worker_is_restricted_with_the_engines_identity_and_sized_requests() -> None:
    pod = _sglang_pod()
    wired = _wire(pod, runtime="SGLang", lmCache={"hostMemory": {"capacity": "8Gi"}})
    added = _added(pod, wired)
    assert set(added) == {"kvevent-subscriber", "lmcache-mp-worker"}
    worker = added["lmcache-mp-worker"]
    assert worker["securityContext"] == {
        **RESTRICTED,
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
    }
    # The L1 (8 GiB) plus the process: requested, with a limit that leaves headroom.
    assert worker["resources"] == {
        "requests": {"cpu": "100m", "memory": "9Gi"},
        "limits": {"cpu": "2", "memory": "10Gi"},
    }


def test_engine_containers_stay_untouched_by_the_security_wiring() -> None:
    for pod, runtime in ((_vllm_pod(), "VLLM"), (_sglang_pod(), "SGLang")):
        wired = _wire(pod, runtime=runtime)
        engine_before = pod["spec"]["containers"][0]
        engine_after = wired["spec"]["containers"][0]
        assert engine_after["securityContext"] == engine_before["securityContext"]
        assert engine_after.get("resources") == engine_before.get("resources")


def test_root_engine_image_containers_are_not_forced_non_root() -> None:
    """An engine that runs as root (vLLM/SGLang images do) keeps working: the worker and
    the check run from its image, so runAsNonRoot there would make the kubelet refuse
    them. They still drop every capability and privilege escalation."""
    for pod, runtime, name in (
        (_vllm_pod(engine_sc=None), "VLLM", "lmcache-kernel-check"),
        (_sglang_pod(engine_sc=None), "SGLang", "lmcache-mp-worker"),
    ):
        added = _added(pod, _wire(pod, runtime=runtime))[name]
        assert added["securityContext"] == RESTRICTED


def test_pod_level_identity_is_inherited_not_copied() -> None:
    """RunAsNonRoot at pod level applies to every container, the added ones included."""
    pod = _sglang_pod(engine_sc=None, securityContext={"runAsNonRoot": True, "runAsUser": 1000})
    worker = _added(pod, _wire(pod, runtime="SGLang"))["lmcache-mp-worker"]
    assert worker["securityContext"] == RESTRICTED


@pytest.mark.parametrize("pod_sc", [{"runAsUser": 0}, {"runAsNonRoot": False}])
def test_subscriber_is_not_forced_non_root_in_a_pod_that_runs_as_root(
    pod_sc: dict[str, Any],
) -> None:
    """The kubelet would refuse a runAsNonRoot container in a pod pinned to root."""
    pod = _vllm_pod(engine_sc=None, securityContext=pod_sc)
    sub = _added(pod, _wire(pod))["kvevent-subscriber"]
    assert sub["securityContext"] == RESTRICTED


def test_events_only_subscriber_is_restricted_too() -> None:
    pod = _vllm_pod()
    wired = _wire(pod, integration={"mode": c.MODE_EVENTS_ONLY})
    sub = _added(pod, wired)["kvevent-subscriber"]
    assert sub["securityContext"] == {**RESTRICTED, "runAsNonRoot": True}


# Engine containers as the API server hands them to the webhook (a LimitRange's
# defaults applied): Guaranteed, burstable within a ratio, requests only, tiny.
FIT_ENGINES = [
    {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}},
    {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"cpu": "8", "memory": "64Gi"}},
    {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
    {"requests": {"cpu": "1", "memory": "2Gi"}},
    {"requests": {"cpu": "300m", "memory": "600Mi"}, "limits": {"cpu": "900m", "memory": "1Gi"}},
]


def _bounds_passed_by(resources: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    """Per cpu/memory: (request, limit, limit/request), exact."""
    from shared.quantity import parse_quantity

    out = {}
    for name in ("cpu", "memory"):
        req = resources.get("requests", {}).get(name)
        lim = resources.get("limits", {}).get(name)
        r = parse_quantity(req) if req else None
        l_ = parse_quantity(lim) if lim else None
        out[name] = (r, l_, (l_ / r) if r and l_ else None)
    return out


@pytest.mark.parametrize("engine", FIT_ENGINES)
@pytest.mark.parametrize(
    "own", [security.SUBSCRIBER_RESOURCES, security.worker_resources(2)], ids=["sub", "worker"]
)
def test_fit_to_engine_passes_every_limit_range_bound_the_engine_passes(
    engine: dict[str, Any], own: dict[str, Any]
) -> None:
    """Rule fit_to_engine: an added container's limit is at most the engine's (any
    ``max``), its request at least the engine's up to its own limit (any ``min``), its
    limit-to-request ratio at most the engine's (any ``maxLimitRequestRatio``); it
    never reserves more than its own limit nor gets less than its own request."""
    fitted = security.fit_to_engine(own, {"resources": engine})
    mine, theirs, wanted = (
        _bounds_passed_by(fitted),
        _bounds_passed_by(engine),
        _bounds_passed_by(own),
    )
    for name in ("cpu", "memory"):
        request, limit, ratio = mine[name]
        e_request, e_limit, e_ratio = theirs[name]
        own_request, own_limit, _ = wanted[name]
        assert own_request <= request <= limit <= own_limit, (name, fitted)
        if e_limit is not None and own_request <= e_limit:
            assert limit <= e_limit, (name, fitted)
        assert request >= min(e_request, limit), (name, fitted)
        if e_ratio is not None:
            assert ratio <= e_ratio, (name, fitted)


def test_fit_to_engine_without_an_engine_keeps_the_containers_own_values() -> None:
    assert security.fit_to_engine(security.SUBSCRIBER_RESOURCES, None) == (
        security.SUBSCRIBER_RESOURCES
    )
    engine = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert security.fit_to_engine(security.worker_resources(1), engine) == (
        security.worker_resources(1)
    )
