"""The engine-side advisory conditions: EngineKernelsHealthy (and its strict-mode Ready
downgrade), EngineCompatibility, EngineVersionBelowMinimum and LMCacheVersionSkew.
"""

from __future__ import annotations

from typing import Any, Final

from reconciler.status import version_skew
from reconciler.status.engine_pods import (
    KERNEL_ERROR,
    KERNEL_FAILED,
    KERNEL_OK,
    KERNEL_PENDING,
    InjectedPodsObservation,
)
from reconciler.status.managed_readiness import Verdict
from reconciler.status.observed import Observed
from shared import client_versions as cv
from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.backend_mode import Mode
from shared.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    DesiredCondition,
    as_desired,
    find,
)

MAX_PODS_IN_MESSAGE: Final = 10


def _pod_list(items: list[str]) -> str:
    shown = items[:MAX_PODS_IN_MESSAGE]
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def engine_kernels_healthy_condition(
    injected: InjectedPodsObservation | None, previous: dict[str, Any] | None
) -> DesiredCondition | None:
    """EngineKernelsHealthy from the lmcache-kernel-check of the matched engine pods.

    Absent when no matched pod runs the check. Any failure → False/KernelLoadFailed
    (naming the pods and errors); else a check that ended without a recognised result
    → Unknown/KernelCheckError; else one still running/waiting →
    Unknown/KernelCheckPending; else True/KernelsHealthy. Pods not listed this time
    (None) keep the prior verdict.
    """
    if injected is None:
        return as_desired(previous)
    reports = injected.kernel_checks
    if not reports:
        return None
    by_state: dict[str, list[str]] = {}
    for r in reports:
        text = r.pod
        if r.state == KERNEL_FAILED:
            text = f"{r.pod} ({r.mode}): {r.detail}"
        elif r.state == KERNEL_ERROR:
            text = f"{r.pod}: {r.detail}"
        by_state.setdefault(r.state, []).append(text)
    if KERNEL_FAILED in by_state:
        return DesiredCondition(
            c.COND_ENGINE_KERNELS_HEALTHY,
            FALSE,
            c.REASON_KERNEL_LOAD_FAILED,
            "LMCache native kernels (lmcache.c_ops, or lmcache.cuda_ops from 0.5) failed to load on "
            f"{len(by_state[KERNEL_FAILED])}/{len(reports)} engine pod(s): "
            f"{_pod_list(by_state[KERNEL_FAILED])}. Align the engine image's lmcache build "
            "with its CUDA runtime.",
        )
    if KERNEL_ERROR in by_state:
        return DesiredCondition(
            c.COND_ENGINE_KERNELS_HEALTHY,
            UNKNOWN,
            c.REASON_KERNEL_CHECK_ERROR,
            "The lmcache-kernel-check terminated without a recognised result on "
            f"{_pod_list(by_state[KERNEL_ERROR])}.",
        )
    if KERNEL_PENDING in by_state:
        return DesiredCondition(
            c.COND_ENGINE_KERNELS_HEALTHY,
            UNKNOWN,
            c.REASON_KERNEL_CHECK_PENDING,
            f"The lmcache-kernel-check has not finished on {_pod_list(by_state[KERNEL_PENDING])}.",
        )
    assert set(by_state) == {KERNEL_OK}
    return DesiredCondition(
        c.COND_ENGINE_KERNELS_HEALTHY,
        TRUE,
        c.REASON_KERNELS_HEALTHY,
        f"LMCache native kernels loaded on all {len(reports)} engine pod(s) that ran the check.",
    )


def engine_kernel_strict_gate(
    base: Verdict,
    injected: InjectedPodsObservation | None,
    kernels: DesiredCondition | None,
    previous_ready: dict[str, Any] | None,
) -> Verdict:
    """Strict kernel-check mode (read from each pod) downgrades an otherwise-Ready
    backend to Ready=False/EngineKernelDegraded when a strict pod's kernels failed to
    load; report-only never does. With the pods not listed this time, a downgrade
    already published stays while the preserved verdict is still a failure."""
    if not base.ready:
        return base
    if injected is None:
        if (
            previous_ready is not None
            and previous_ready.get("reason") == c.REASON_ENGINE_KERNEL_DEGRADED
            and kernels is not None
            and kernels.reason == c.REASON_KERNEL_LOAD_FAILED
        ):
            return Verdict(
                False, c.REASON_ENGINE_KERNEL_DEGRADED, str(previous_ready.get("message") or "")
            )
        return base
    strict = [
        r.pod
        for r in injected.kernel_checks
        if r.state == KERNEL_FAILED and r.mode == c.KERNEL_CHECK_STRICT
    ]
    if not strict:
        return base
    return Verdict(
        False,
        c.REASON_ENGINE_KERNEL_DEGRADED,
        "Engine pod(s) admitted in strict kernel-check mode failed to load the LMCache "
        f"native kernels and cannot serve: {_pod_list(strict)}. See EngineKernelsHealthy.",
    )


def engine_version_conditions(
    cb: CacheBackend, mode: Mode, observed: Observed, prev_conditions: list[dict[str, Any]]
) -> list[DesiredCondition]:
    """The two advisory version conditions of an engine-side advisory mode (never
    gating Ready): EngineVersionBelowMinimum for the wiring, and LMCacheVersionSkew when
    the backend provisions an LMCache server."""
    rs = cb.spec.remote_storage
    provider = rs.provider if rs is not None and rs.provider else None
    out = [
        version_skew.engine_version_below_minimum_condition(
            cb.spec.runtime,
            effective.cache_type(cb.spec),
            provider,
            observed.injected_pods,
            find(prev_conditions, c.COND_ENGINE_VERSION_BELOW_MINIMUM),
        )
    ]
    # Only a Managed backend runs the server whose image names its version.
    image = cv.lmcache_server_image(cb) if mode == Mode.MANAGED else None
    if image is not None:
        out.append(
            version_skew.lmcache_version_skew_condition(
                image, observed.injected_pods, find(prev_conditions, c.COND_LMCACHE_VERSION_SKEW)
            )
        )
    return [x for x in out if x is not None]


def engine_compatibility_condition(
    injected: InjectedPodsObservation | None, previous: dict[str, Any] | None
) -> DesiredCondition | None:
    """EngineCompatibility=False/InjectedEngineCrashLooping while an injected engine
    container is in CrashLoopBackOff; absent otherwise. Never gates Ready. A pod list
    that failed this time (None) keeps the prior condition."""
    if injected is None:
        return as_desired(previous)
    if not injected.crash_loops:
        return None
    looping = [
        f"{loop.pod} (container {', '.join(loop.containers)})" for loop in injected.crash_loops
    ]
    return DesiredCondition(
        c.COND_ENGINE_COMPATIBILITY,
        FALSE,
        c.REASON_INJECTED_ENGINE_CRASH_LOOPING,
        f"Injected engine pod(s) in CrashLoopBackOff after KV-connector injection: "
        f"{_pod_list(looping)}. A common cause is a connector incompatibility (e.g. a "
        "hybrid-attention model: use spec.integration.mode: EventsOnly), but a bad image, "
        "command, secret or OOM crash-loops the same way: check the engine logs.",
    )
