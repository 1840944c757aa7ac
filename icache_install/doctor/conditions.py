"""Every CacheBackend condition reason the spec defines, as a sentence and a next step.

The spec's "Conditions" section (and the reconciler's reasons it implies: a stuck
Progressing is ``Degraded``, an unsupported pair ``UnsupportedRuntimePair``, a name
taken by an object we do not own ``NameConflict``). A finding's code is
``backend.<Type>.<Reason>``; a reason not in this table is ``backend.UnknownCondition``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from icache_install.doctor.findings import Severity
from shared import constants as c

E, W, OK = Severity.ERROR, Severity.WARNING, Severity.INFO

_CHECK_WORKLOAD = (
    "kubectl -n {ns} describe deployment,statefulset -l inferencecache.io/cachebackend={name}; "
    "read the provider pods' events and logs"
)
_CHECK_ENGINES = (
    "check that engine pods are wired to it (icache doctor lists them), then the engines' "
    "--kv-events-config and that their ZMQ publisher bound"
)
_READ_MESSAGE = "read the condition's message: kubectl -n {ns} describe cb {name}"


@dataclass(frozen=True)
class Explanation:
    severity: Severity
    sentence: str
    next_step: str


TABLE: Final[dict[tuple[str, str], Explanation]] = {
    # Ready
    (c.COND_READY, c.REASON_BACKEND_READY): Explanation(
        OK, "the managed workload is available; the KV-event and probe gates are off", ""
    ),
    (c.COND_READY, c.REASON_ROLLOUT_IN_PROGRESS): Explanation(
        W, "the managed workload is rolling out its current generation", _CHECK_WORKLOAD
    ),
    (c.COND_READY, c.REASON_SCALED_TO_ZERO): Explanation(
        W,
        "the managed workload is scaled to zero: engine pods get no remote tier",
        "set spec.replicas (or the HPA's minReplicas) above 0 to serve",
    ),
    (c.COND_READY, c.REASON_POD_CREATION_FAILED): Explanation(
        E,
        "the managed workload cannot create its pods: the API server refuses them",
        "see backend.PodCreationFailed for the cause and its fix",
    ),
    (c.COND_READY, c.REASON_REPLICAS_UNAVAILABLE): Explanation(
        E, "the managed workload rolled out but its replicas are unavailable", _CHECK_WORKLOAD
    ),
    (c.COND_READY, c.REASON_HOST_ONLY_ACTIVE): Explanation(
        OK, "host-only: engine pods use node-local LMCache host memory, no remote tier", ""
    ),
    (c.COND_READY, c.REASON_ENGINE_PODS_WIRED): Explanation(
        OK,
        "vLLM offloading: selected engine pods are wired with vLLM's OffloadingConnector "
        "and its /dev/shm, no provider workload",
        "",
    ),
    (c.COND_READY, c.REASON_NO_ENGINE_PODS_WIRED): Explanation(
        W,
        "vLLM offloading: no selected engine pod is wired with the OffloadingConnector yet",
        "create or roll the engine workload; a pod left unwired says why (icache admit-pod "
        "-f <workload> --backends-from <dir> shows the decision): vLLM below 0.33.0, the "
        "pod's own --kv-offloading-size or OffloadingConnector, or a /dev/shm too small",
    ),
    (c.COND_READY, c.REASON_EVENTS_ONLY_ACTIVE): Explanation(
        OK, "events-only: engines are wired for cache-aware routing, no offload", ""
    ),
    (c.COND_READY, c.REASON_EXTERNAL_ENDPOINT_ACCEPTED): Explanation(
        OK, "the externally owned endpoint is valid for its provider (it is not probed)", ""
    ),
    (c.COND_READY, c.REASON_EXTERNAL_ENDPOINT_MISSING): Explanation(
        E,
        "External ownership without spec.remoteStorage.endpoint: engine pods are admitted unwired",
        "set spec.remoteStorage.endpoint to the provider's host:port",
    ),
    (c.COND_READY, c.REASON_EXTERNAL_ENDPOINT_INVALID): Explanation(
        E,
        "spec.remoteStorage.endpoint is not valid for the provider: engine pods are admitted "
        "unwired",
        "fix spec.remoteStorage.endpoint (icache validate shows the rule), then roll the engines",
    ),
    (c.COND_READY, c.REASON_CROSS_NAMESPACE_CONSENT_MISSING): Explanation(
        E,
        "the managed tier this backend points at does not admit its namespace: its "
        "NetworkPolicy refuses the engines",
        f"ask the tier's owner to add this namespace to {c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES}",
    ),
    (c.COND_READY, c.REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING): Explanation(
        E,
        "the managed tier requires a password and this namespace has no copy of it yet: its "
        "engines are refused (NOAUTH)",
        "check the tier's <backend>-redis-auth Secret exists; roll the engines once "
        "this backend is Ready",
    ),
    (c.COND_READY, c.REASON_AWAITING_FIRST_KV_EVENT): Explanation(
        W, "the backend is up and waiting for its first KV event from an engine", _CHECK_ENGINES
    ),
    (c.COND_READY, c.REASON_KV_EVENTS_OBSERVED): Explanation(
        OK, "KV events from the engines have reached the index", ""
    ),
    (c.COND_READY, c.REASON_NO_KV_EVENTS_OBSERVED): Explanation(
        E, "no KV event arrived within spec.observation.firstEventTimeout", _CHECK_ENGINES
    ),
    (c.COND_READY, c.REASON_ENGINE_KERNEL_DEGRADED): Explanation(
        E,
        "a strict-mode engine pod failed the LMCache native-kernel check",
        "align the engine image's lmcache wheel with its CUDA runtime, or set the "
        "inferencecache.io/lmcache-kernel-check annotation to report-only",
    ),
    (c.COND_READY, c.REASON_PROBE_INGEST_FAILED): Explanation(
        E,
        "the functional probe failed at ingest: the server's ingest path is broken",
        _READ_MESSAGE,
    ),
    (c.COND_READY, c.REASON_PROBE_ROUTING_FAILED): Explanation(
        E,
        "the functional probe failed at routing: index routing or key derivation is broken",
        _READ_MESSAGE,
    ),
    (c.COND_READY, c.REASON_PROBE_T2_FAILED): Explanation(
        E,
        "the functional probe failed at tier 2: the remote store rejected put or get",
        _READ_MESSAGE,
    ),
    (c.COND_READY, c.REASON_UNSUPPORTED_RUNTIME_PAIR): Explanation(
        E,
        "no runtime adapter for this runtime/type pair: engine pods are admitted unwired",
        "use a supported pair (icache validate lists them)",
    ),
    (c.COND_READY, c.REASON_NAME_CONFLICT): Explanation(
        E,
        "an object the backend would create already exists and is not ours",
        "rename or delete the conflicting object named in the message",
    ),
    # Degraded
    (c.COND_DEGRADED, c.REASON_NOT_DEGRADED): Explanation(OK, "not degraded", ""),
    (c.COND_DEGRADED, c.REASON_REPLICAS_UNAVAILABLE): Explanation(
        E, "degraded: the managed workload's replicas are unavailable", _CHECK_WORKLOAD
    ),
    (c.COND_DEGRADED, c.REASON_NO_KV_EVENTS_OBSERVED): Explanation(
        E, "degraded: no KV event within firstEventTimeout", _CHECK_ENGINES
    ),
    (c.COND_DEGRADED, c.REASON_NAME_CONFLICT): Explanation(
        E, "degraded: a name the backend needs is taken", "see the Ready condition's message"
    ),
    # Progressing
    (c.COND_PROGRESSING, c.REASON_SYNCED): Explanation(
        OK, "the controller has converged on this generation", ""
    ),
    (c.COND_PROGRESSING, c.REASON_ROLLOUT_IN_PROGRESS): Explanation(
        OK, "the controller is rolling the managed workload out", ""
    ),
    (c.COND_PROGRESSING, c.REASON_AWAITING_FIRST_KV_EVENT): Explanation(
        OK, "the controller is waiting for the first KV event", ""
    ),
    (c.COND_PROGRESSING, c.REASON_SCALED_TO_ZERO): Explanation(
        OK, "nothing to drive: the managed workload is scaled to zero", ""
    ),
    (c.COND_PROGRESSING, c.REASON_POD_CREATION_FAILED): Explanation(
        W,
        "stuck: the API server refuses the managed workload's pods (see Ready)",
        "see backend.PodCreationFailed",
    ),
    (c.COND_PROGRESSING, c.REASON_DEGRADED): Explanation(
        W, "stuck: the controller cannot converge (see Degraded)", "see the Degraded condition"
    ),
    (c.COND_PROGRESSING, c.REASON_EXTERNAL_ENDPOINT_ACCEPTED): Explanation(
        OK, "External ownership: no rollout to drive", ""
    ),
    (c.COND_PROGRESSING, c.REASON_EXTERNAL_ENDPOINT_MISSING): Explanation(
        OK, "External ownership: no rollout to drive (see Ready)", ""
    ),
    (c.COND_PROGRESSING, c.REASON_EXTERNAL_ENDPOINT_INVALID): Explanation(
        OK, "External ownership: no rollout to drive (see Ready)", ""
    ),
    (c.COND_PROGRESSING, c.REASON_CROSS_NAMESPACE_CONSENT_MISSING): Explanation(
        OK, "External ownership: no rollout to drive (see Ready)", ""
    ),
    (c.COND_PROGRESSING, c.REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING): Explanation(
        OK, "External ownership: no rollout to drive (see Ready)", ""
    ),
    (c.COND_PROGRESSING, c.REASON_NO_ENGINE_PODS_WIRED): Explanation(
        OK, "vLLM offloading: waiting for selected engine pods to be wired (see Ready)", ""
    ),
    (c.COND_PROGRESSING, c.REASON_UNSUPPORTED_RUNTIME_PAIR): Explanation(
        OK, "nothing to drive for an unsupported pair (see Ready)", ""
    ),
    # FunctionalProbeOK
    (c.COND_FUNCTIONAL_PROBE_OK, c.REASON_PROBE_OK): Explanation(
        OK, "the functional probe round-tripped every stage", ""
    ),
    (c.COND_FUNCTIONAL_PROBE_OK, c.REASON_PROBE_BYPASSED): Explanation(
        W,
        "the functional probe is skipped (inferencecache.io/skip-functional-probe)",
        "remove the annotation once the probe is trusted",
    ),
    (c.COND_FUNCTIONAL_PROBE_OK, c.REASON_PROBE_ERROR): Explanation(
        W,
        "the worker could not reach the server's /probe",
        "check the worker's --server-url, its projected token and the server's TokenReview",
    ),
    (c.COND_FUNCTIONAL_PROBE_OK, c.REASON_PROBE_INGEST_FAILED): Explanation(
        E, "the probe's ingest stage failed", _READ_MESSAGE
    ),
    (c.COND_FUNCTIONAL_PROBE_OK, c.REASON_PROBE_ROUTING_FAILED): Explanation(
        E, "the probe's routing stage failed", _READ_MESSAGE
    ),
    (c.COND_FUNCTIONAL_PROBE_OK, c.REASON_PROBE_T2_FAILED): Explanation(
        E, "the probe's tier-2 stage failed", _READ_MESSAGE
    ),
    # EngineKernelsHealthy
    (c.COND_ENGINE_KERNELS_HEALTHY, c.REASON_KERNELS_HEALTHY): Explanation(
        OK, "the LMCache native kernels loaded on every reporting engine pod", ""
    ),
    (c.COND_ENGINE_KERNELS_HEALTHY, c.REASON_KERNEL_LOAD_FAILED): Explanation(
        E,
        "LMCache's native kernels failed to load on an engine pod: tier-2 reload serialises "
        "(~10x slower)",
        "match the engine image's lmcache wheel to its CUDA runtime (the message names the cause)",
    ),
    (c.COND_ENGINE_KERNELS_HEALTHY, c.REASON_KERNEL_CHECK_ERROR): Explanation(
        W, "a kernel check ended without a result", "read the lmcache-kernel-check container log"
    ),
    (c.COND_ENGINE_KERNELS_HEALTHY, c.REASON_KERNEL_CHECK_PENDING): Explanation(
        OK, "a kernel check is still running", ""
    ),
    # T2Degraded
    (c.COND_T2_DEGRADED, c.REASON_T2_ZERO_HIT_RATE): Explanation(
        E,
        "tier 2 was queried but served no reload: a store/connection failure, an undersized "
        "server or a hash mismatch",
        "check the LMCache server/client versions and the server's memory (spec: version "
        "alignment)",
    ),
    (c.COND_T2_DEGRADED, c.REASON_T2_SERVING): Explanation(OK, "tier 2 is serving reloads", ""),
    # EngineCompatibility
    (c.COND_ENGINE_COMPATIBILITY, c.REASON_INJECTED_ENGINE_CRASH_LOOPING): Explanation(
        E,
        "an injected engine container is crash-looping after connector injection",
        "read the engine logs; for a hybrid-attention model set spec.integration.mode: "
        "EventsOnly (not skip-inject, which drops routing too)",
    ),
    # LMCacheVersionSkew
    (c.COND_LMCACHE_VERSION_SKEW, c.REASON_CLIENT_SERVER_VERSION_SKEW): Explanation(
        W,
        "an engine pod's lmcache client differs from the LMCache server in major.minor: "
        "remote stores may fail and tier 2 serve no reload",
        "align spec.remoteStorage.lmCacheServer.image with the engine image's lmcache "
        "(the message lists both), then roll the engines: kubectl -n {ns} describe cb {name}",
    ),
    (c.COND_LMCACHE_VERSION_SKEW, c.REASON_VERSIONS_ALIGNED): Explanation(
        OK, "every reporting engine pod's lmcache client matches the server in major.minor", ""
    ),
    (c.COND_LMCACHE_VERSION_SKEW, c.REASON_SERVER_VERSION_UNKNOWN): Explanation(
        OK,
        "the LMCache server image names no release (a digest or another tag): client/server "
        "skew is not checked",
        "",
    ),
    (c.COND_LMCACHE_VERSION_SKEW, c.REASON_CLIENT_VERSION_UNKNOWN): Explanation(
        OK,
        "no engine pod reported its lmcache client (not installed in the image, e.g. "
        "pip-installed at start, or a kernel check from an older release)",
        "",
    ),
    # EngineVersionBelowMinimum
    (c.COND_ENGINE_VERSION_BELOW_MINIMUM, c.REASON_RELEASE_BELOW_MINIMUM): Explanation(
        W,
        "an engine pod runs a vLLM or LMCache release older than the minimum the "
        "engine-contract tests prove for this wiring",
        "move the engine image to a newer release (docs/api.md, Engine versions)",
    ),
    (c.COND_ENGINE_VERSION_BELOW_MINIMUM, c.REASON_RELEASES_AT_MINIMUM): Explanation(
        OK, "every reporting engine pod runs releases at or above the proven minimum", ""
    ),
    # EngineHostMemory
    (c.COND_ENGINE_HOST_MEMORY, c.REASON_PINNED_HOST_MEMORY_OVER_LIMIT): Explanation(
        W,
        "an injected engine pod pins more host memory for the KV cache than its "
        "container's memory limit: the kernel's OOM killer may end the engine as the "
        "cache fills",
        "raise the container's resources.limits.memory or lower the host-memory budget "
        "(docs/api.md, Host memory per pod); " + _READ_MESSAGE,
    ),
    # EngineOffloading
    (c.COND_ENGINE_OFFLOADING, c.REASON_ENGINE_OFFLOADING_CONFLICT): Explanation(
        W,
        "a selected engine pod sets vLLM's own --kv-offloading-size, which overwrites the KV "
        "connector: the webhook admitted it unwired, so no cache tier of this backend serves it",
        "remove --kv-offloading-size from the engine and roll it, or take the pod out of "
        "spec.engineSelector; " + _READ_MESSAGE,
    ),
}


def explain(type_: str, reason: str) -> Explanation | None:
    return TABLE.get((type_, reason))
