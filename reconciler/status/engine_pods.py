"""Pure reading of engine and cache-server pods for the advisory conditions and the cascade.

Nothing here does I/O: the reconcile shell reads the pods that can matter to one backend
(``reconciler.steps.reads``: its engine pods, its injected pods, its cache-server pods) and
these functions turn the raw pod dicts into the small observations
``reconciler.status.compute`` and ``reconciler.status.cascade`` decide on.

- ``shared.backend_keys.injected_by_backend``: a pod belongs to a backend when the webhook's
  ``injected-by: <ns>/<name>`` names it AND ``injected-by-uid`` equals the live
  backend's metadata.uid (a copied template from a deleted-and-recreated CR does not).
- ``kernel_check_report``: the verdict of the ``lmcache-kernel-check`` init container,
  read from its termination message (current state, else the last termination — a
  strict check that failed is restarted by the kubelet and waits in CrashLoopBackOff
  with the verdict on ``lastState``); the mode comes from the pod, never from the
  backend's current annotation. A verdict also carries the versions the check read
  from the image's installed package metadata (``versions``: lmcache, vllm, torch, each
  absent when not installed); a verdict from before that field parses with none.
- ``crash_looping_engine_containers``: the pod's containers other than the
  kvevent-subscriber whose waiting reason is CrashLoopBackOff.
- host memory: the containers whose memory limit cannot hold the host memory the
  wiring pins (``shared.runtime_adapters.host_memory_fit``).
- ``offloading_declined_pods``: the selected pods the webhook left unwired because
  their own ``--kv-offloading-size`` overwrites the connector (EngineOffloading).
- ``server_pods``: the managed workload's pods, with the restart sum over the
  cache-server's own container names (the workload's pod template), so a crashing
  sidecar injected by another webhook is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from shared import constants as c
from shared.backend_keys import injected_by_backend
from shared.client_versions import (
    kernel_check_termination,
    reported_versions,
)
from shared.client_versions import (
    parse_kernel_check_verdict as parse_kernel_check_verdict,
)
from shared.labels import labels_match
from shared.objects import meta
from shared.runtime_adapters import kernel_check
from shared.runtime_adapters.engine import SUBSCRIBER_CONTAINER
from shared.runtime_adapters.host_memory_fit import (
    PinnedHostMemory,
    pinned_host_memory_exceeds_limit,
)

CRASH_LOOP_BACK_OFF: Final = "CrashLoopBackOff"

KERNEL_OK: Final = "ok"
KERNEL_FAILED: Final = "failed"
KERNEL_ERROR: Final = "error"
KERNEL_PENDING: Final = "pending"

# Bounds on what a pod contributes to a condition message.
MAX_DETAIL_CHARS: Final = 300
# Bounds on a condition message: this many pods named, then a count.
MAX_PODS_NAMED: Final = 10


@dataclass(frozen=True)
class KernelCheckReport:
    """One pod's kernel check: ``state`` is ok | failed | error | pending; ``versions``
    the (package, version) pairs its verdict reported, sorted by package."""

    pod: str
    mode: str
    state: str
    detail: str = ""
    versions: tuple[tuple[str, str], ...] = ()

    def version(self, package: str) -> str | None:
        return dict(self.versions).get(package)


@dataclass(frozen=True)
class CrashLoop:
    pod: str
    containers: tuple[str, ...]


@dataclass(frozen=True)
class HostMemoryShortfall:
    """An injected pod whose containers cannot hold the host memory the wiring pins."""

    pod: str
    containers: tuple[PinnedHostMemory, ...]


@dataclass(frozen=True)
class InjectedPodsObservation:
    """What the backend's injected engine pods show, sorted by pod name."""

    kernel_checks: tuple[KernelCheckReport, ...] = ()
    crash_loops: tuple[CrashLoop, ...] = ()
    host_memory: tuple[HostMemoryShortfall, ...] = ()
    # The live pods this backend wired, by name.
    wired: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerPod:
    name: str
    uid: str
    ready: bool
    restarts: int


@dataclass(frozen=True)
class ServerPodsObservation:
    pods: tuple[ServerPod, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------ small readers


def _terminating(pod: dict[str, Any]) -> bool:
    return bool(meta(pod).deletion_timestamp)


def _clip(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ injected pods


def _status_named(statuses: Iterable[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    for st in statuses or ():
        if st.get("name") == name:
            return st
    return None


def kernel_check_mode_of_pod(pod: dict[str, Any]) -> str:
    """The mode the pod was admitted under: the webhook's record on the pod, else the
    check container's own mode env. Anything but ``strict`` never downgrades Ready."""
    raw = meta(pod).annotations.get(
        c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE
    ) or kernel_check.mode_on_pod(pod)
    mode = (raw or "").strip().lower()
    return c.KERNEL_CHECK_STRICT if mode == c.KERNEL_CHECK_STRICT else c.KERNEL_CHECK_REPORT_ONLY


def kernel_check_report(pod: dict[str, Any]) -> KernelCheckReport | None:
    """The pod's kernel-check verdict; None when the pod does not run the check."""
    spec = pod.get("spec") or {}
    if _status_named(spec.get("initContainers"), kernel_check.CONTAINER_NAME) is None:
        return None
    name = meta(pod).name
    mode = kernel_check_mode_of_pod(pod)
    terminated = kernel_check_termination(pod)
    if not terminated:
        return KernelCheckReport(name, mode, KERNEL_PENDING)
    verdict = parse_kernel_check_verdict(terminated.get("message"))
    result = verdict.get("result") if verdict else None
    versions = reported_versions(verdict)
    if result == "ok":
        return KernelCheckReport(name, mode, KERNEL_OK, versions=versions)
    if result == "failed":
        error = str((verdict or {}).get("error") or "") or "no error text"
        return KernelCheckReport(name, mode, KERNEL_FAILED, _clip(error), versions)
    code = terminated.get("exitCode")
    reason = terminated.get("reason") or ""
    detail = f"exit code {code}" + (f" ({reason})" if reason else "")
    if verdict is not None:
        detail += f", result {result!r}"
    elif terminated.get("message"):
        detail += f", message {_clip(str(terminated['message']), 120)!r}"
    return KernelCheckReport(name, mode, KERNEL_ERROR, detail, versions)


def engine_container_names(pod: dict[str, Any]) -> list[str]:
    """The pod's containers other than the webhook's kvevent-subscriber."""
    return [
        str(ct.get("name"))
        for ct in (pod.get("spec") or {}).get("containers") or []
        if ct.get("name") != SUBSCRIBER_CONTAINER
    ]


def crash_looping_engine_containers(pod: dict[str, Any]) -> tuple[str, ...]:
    engines = set(engine_container_names(pod))
    out = []
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (st.get("state") or {}).get("waiting") or {}
        if st.get("name") in engines and waiting.get("reason") == CRASH_LOOP_BACK_OFF:
            out.append(str(st.get("name")))
    return tuple(sorted(out))


def observe_injected_pods(
    pods: Sequence[dict[str, Any]], namespace: str, name: str, uid: str | None
) -> InjectedPodsObservation:
    """Kernel-check reports and crash-loops of the live (not terminating) pods this
    backend injected, in pod-name order so messages are stable across reconciles."""
    reports: list[KernelCheckReport] = []
    loops: list[CrashLoop] = []
    short: list[HostMemoryShortfall] = []
    mine = [p for p in pods if injected_by_backend(p, namespace, name, uid) and not _terminating(p)]
    for pod in sorted(mine, key=lambda p: meta(p).name):
        report = kernel_check_report(pod)
        if report is not None:
            reports.append(report)
        looping = crash_looping_engine_containers(pod)
        if looping:
            loops.append(CrashLoop(meta(pod).name, looping))
        over = pinned_host_memory_exceeds_limit(pod)
        if over:
            short.append(HostMemoryShortfall(meta(pod).name, tuple(over)))
    wired = tuple(sorted(meta(p).name for p in mine))
    return InjectedPodsObservation(tuple(reports), tuple(loops), tuple(short), wired)


def offloading_declined_pods(
    pods: Sequence[dict[str, Any]], namespace: str, name: str
) -> tuple[str, ...]:
    """The live selected pods the Pod webhook declined for this backend because their
    own KV offloading would overwrite the connector, by name."""
    key = f"{namespace}/{name}"
    out = [
        meta(p).name
        for p in pods
        if not _terminating(p)
        and meta(p).annotations.get(c.ANNOTATION_INJECT_DECLINED)
        == c.REASON_ENGINE_OFFLOADING_CONFLICT
        and meta(p).annotations.get(c.ANNOTATION_INJECT_DECLINED_BY) == key
    ]
    return tuple(sorted(out))


# ------------------------------------------------------------------ cache-server pods


def _pod_ready(pod: dict[str, Any]) -> bool:
    if _terminating(pod):
        return False
    return any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in (pod.get("status") or {}).get("conditions") or []
    )


def server_container_names(workload: dict[str, Any]) -> frozenset[str]:
    """The cache-server's own containers: those declared on the workload's template."""
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    return frozenset(
        str(ct.get("name"))
        for key in ("containers", "initContainers")
        for ct in template.get(key) or []
        if ct.get("name")
    )


def restart_sum(pod: dict[str, Any], containers: frozenset[str]) -> int:
    st = pod.get("status") or {}
    return sum(
        int(cs.get("restartCount") or 0)
        for key in ("containerStatuses", "initContainerStatuses")
        for cs in st.get(key) or []
        if cs.get("name") in containers
    )


def workload_selector(workload: dict[str, Any]) -> dict[str, str]:
    """The managed workload's spec.selector.matchLabels."""
    return {
        str(k): str(v)
        for k, v in (
            ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        ).items()
    }


def server_pods(pods: Sequence[dict[str, Any]], workload: dict[str, Any]) -> ServerPodsObservation:
    """The live pods the managed workload selects (spec.selector.matchLabels)."""
    selector = workload_selector(workload)
    containers = server_container_names(workload)
    out = [
        ServerPod(
            name=meta(p).name,
            uid=meta(p).uid,
            ready=_pod_ready(p),
            restarts=restart_sum(p, containers),
        )
        for p in pods
        if labels_match(selector, meta(p).labels) and meta(p).uid
    ]
    return ServerPodsObservation(tuple(sorted(out, key=lambda p: p.name)))
