"""Names the spec fixes: API identity, annotations, condition types, reasons, Event reasons.

Spelled exactly as docs/api.md (and the reference spec) spell them so one search finds
every use.
"""

from typing import Final

GROUP: Final = "inferencecache.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "CacheBackend"
PLURAL: Final = "cachebackends"
SINGULAR: Final = "cachebackend"
SHORT_NAME: Final = "cb"

# The namespace the install (manifests/) puts the webhook, dispatcher, worker and
# Redis in; the default of every process and installer flag that names it.
INSTALL_NAMESPACE: Final = "inference-cache-system"
# The install's objects in that namespace (the names manifests/ gives them): the one
# table the processes' flag defaults, the cert installer and doctor read.
WEBHOOK_DEPLOYMENT: Final = "inference-cache-webhook"
WEBHOOK_SERVICE: Final = "inference-cache-webhook"
WEBHOOK_TLS_SECRET: Final = "inference-cache-webhook-tls"
MUTATING_WEBHOOK_CONFIGURATION: Final = "inference-cache-mutating"
VALIDATING_WEBHOOK_CONFIGURATION: Final = "inference-cache-validating"
DISPATCHER_DEPLOYMENT: Final = "inference-cache-dispatcher"
# The dispatcher's leader-election Lease.
DISPATCHER_LEASE: Final = "inference-cache-dispatcher"
WORKER_DEPLOYMENT: Final = "inference-cache-worker"
REDIS_AUTH_SECRET: Final = "inference-cache-redis-auth"

# Runtimes, cache types, providers, ownership, modes, roles.
RUNTIME_VLLM: Final = "VLLM"
RUNTIME_SGLANG: Final = "SGLang"
TYPE_LMCACHE: Final = "LMCache"
TYPE_SGLANG_HICACHE: Final = "SGLangHiCache"
# vLLM's built-in CPU offloading (OffloadingConnector), sized per engine pod.
TYPE_VLLM_OFFLOADING: Final = "VLLMOffloading"
EVICTION_POLICY_LRU: Final = "LRU"
EVICTION_POLICY_ARC: Final = "ARC"
PROVIDER_REDIS: Final = "Redis"
PROVIDER_LMCACHE_SERVER: Final = "LMCacheServer"
PROVIDER_MOONCAKE: Final = "Mooncake"
OWNERSHIP_MANAGED: Final = "Managed"
OWNERSHIP_EXTERNAL: Final = "External"
MODE_OFFLOAD: Final = "Offload"
MODE_EVENTS_ONLY: Final = "EventsOnly"
ROLE_READ_ONLY: Final = "ReadOnly"
ROLE_WRITE_ONLY: Final = "WriteOnly"
ROLE_READ_WRITE: Final = "ReadWrite"
DEPLOYMENT_KIND_DEPLOYMENT: Final = "Deployment"
DEPLOYMENT_KIND_STATEFULSET: Final = "StatefulSet"

# Annotations.
ANNOTATION_INJECTED_BY: Final = "inferencecache.io/injected-by"
ANNOTATION_INJECTED_BY_UID: Final = "inferencecache.io/injected-by-uid"
ANNOTATION_SKIP_INJECT: Final = "inferencecache.io/skip-inject"
ANNOTATION_INJECT_SKIPPED: Final = "inferencecache.io/inject-skipped"
INJECT_SKIPPED_VALUE: Final = "skip-inject-annotation"
ANNOTATION_LMCACHE_KERNEL_CHECK: Final = "inferencecache.io/lmcache-kernel-check"
ANNOTATION_REQUIRE_KV_EVENTS: Final = "inferencecache.io/require-kv-events"
ANNOTATION_SKIP_FUNCTIONAL_PROBE: Final = "inferencecache.io/skip-functional-probe"
ANNOTATION_CACHE_SERVER_RESTART_TRIGGER: Final = "inferencecache.io/cache-server-restart-trigger"
# Operator opt-out of the per-backend NetworkPolicy of a managed cache tier ("true" |
# "false"; unset is "false"). Never a default: the tier is isolated unless asked.
ANNOTATION_SKIP_NETWORK_POLICY: Final = "inferencecache.io/skip-network-policy"
SKIP_NETWORK_POLICY_VALUES: Final = ("true", "false")
# On a managed Redis pod template: a digest of the password it was started with, so a
# changed or re-created password Secret rolls Redis (and, through the cache-server
# cascade, its engines). A digest, never the password.
ANNOTATION_AUTH_DIGEST: Final = "inferencecache.io/auth-digest"
# Records, on the pod, the kernel-check mode the webhook admitted it under.
ANNOTATION_LMCACHE_KERNEL_CHECK_MODE: Final = "inferencecache.io/lmcache-kernel-check-mode"

# Labels. Not in the spec: the webhook stamps the injected-by-uid value as a label too,
# next to the annotation, so the reconciler can select a backend's injected pods on the
# API server (annotations cannot be selected on). The annotations still decide.
LABEL_INJECTED_BY_UID: Final = "inferencecache.io/injected-by-uid"

KERNEL_CHECK_AUTO: Final = "auto"
KERNEL_CHECK_REPORT_ONLY: Final = "report-only"
KERNEL_CHECK_STRICT: Final = "strict"
KERNEL_CHECK_OFF: Final = "off"
KERNEL_CHECK_MODES: Final = (
    KERNEL_CHECK_AUTO,
    KERNEL_CHECK_REPORT_ONLY,
    KERNEL_CHECK_STRICT,
    KERNEL_CHECK_OFF,
)

# Condition types.
COND_READY: Final = "Ready"
COND_DEGRADED: Final = "Degraded"
COND_PROGRESSING: Final = "Progressing"
COND_FUNCTIONAL_PROBE_OK: Final = "FunctionalProbeOK"
COND_ENGINE_KERNELS_HEALTHY: Final = "EngineKernelsHealthy"
COND_T2_DEGRADED: Final = "T2Degraded"
COND_ENGINE_COMPATIBILITY: Final = "EngineCompatibility"
# Advisory: the engine pods' LMCache client against the managed LMCache server, and the
# engine releases against the minimum the engine-contract tests prove.
COND_LMCACHE_VERSION_SKEW: Final = "LMCacheVersionSkew"
COND_ENGINE_VERSION_BELOW_MINIMUM: Final = "EngineVersionBelowMinimum"

# Condition reasons.
REASON_BACKEND_READY: Final = "BackendReady"
REASON_ROLLOUT_IN_PROGRESS: Final = "RolloutInProgress"
REASON_SCALED_TO_ZERO: Final = "ScaledToZero"
REASON_REPLICAS_UNAVAILABLE: Final = "ReplicasUnavailable"
REASON_HOST_ONLY_ACTIVE: Final = "HostOnlyActive"
# Type VLLMOffloading (host-only): Ready follows whether selected engine pods are wired.
REASON_ENGINE_PODS_WIRED: Final = "EnginePodsWired"
REASON_NO_ENGINE_PODS_WIRED: Final = "NoEnginePodsWired"
REASON_EVENTS_ONLY_ACTIVE: Final = "EventsOnlyActive"
REASON_EXTERNAL_ENDPOINT_ACCEPTED: Final = "ExternalEndpointAccepted"
REASON_EXTERNAL_ENDPOINT_MISSING: Final = "ExternalEndpointMissing"
REASON_EXTERNAL_ENDPOINT_INVALID: Final = "ExternalEndpointInvalid"
REASON_AWAITING_FIRST_KV_EVENT: Final = "AwaitingFirstKVEvent"
REASON_KV_EVENTS_OBSERVED: Final = "KVEventsObserved"
REASON_NO_KV_EVENTS_OBSERVED: Final = "NoKVEventsObserved"
REASON_NOT_DEGRADED: Final = "NotDegraded"
REASON_SYNCED: Final = "Synced"
REASON_ENGINE_KERNEL_DEGRADED: Final = "EngineKernelDegraded"
REASON_PROBE_OK: Final = "ProbeOK"
REASON_PROBE_BYPASSED: Final = "ProbeBypassed"
REASON_PROBE_ERROR: Final = "ProbeError"
REASON_PROBE_INGEST_FAILED: Final = "ProbeIngestFailed"
REASON_PROBE_ROUTING_FAILED: Final = "ProbeRoutingFailed"
REASON_PROBE_T2_FAILED: Final = "ProbeT2Failed"
REASON_KERNELS_HEALTHY: Final = "KernelsHealthy"
REASON_KERNEL_LOAD_FAILED: Final = "KernelLoadFailed"
REASON_KERNEL_CHECK_ERROR: Final = "KernelCheckError"
REASON_KERNEL_CHECK_PENDING: Final = "KernelCheckPending"
REASON_T2_ZERO_HIT_RATE: Final = "T2ZeroHitRate"
REASON_T2_SERVING: Final = "T2Serving"
REASON_INJECTED_ENGINE_CRASH_LOOPING: Final = "InjectedEngineCrashLooping"
REASON_CLIENT_SERVER_VERSION_SKEW: Final = "ClientServerVersionSkew"
REASON_VERSIONS_ALIGNED: Final = "VersionsAligned"
REASON_SERVER_VERSION_UNKNOWN: Final = "ServerVersionUnknown"
REASON_CLIENT_VERSION_UNKNOWN: Final = "ClientVersionUnknown"
REASON_RELEASE_BELOW_MINIMUM: Final = "ReleaseBelowMinimum"
REASON_RELEASES_AT_MINIMUM: Final = "ReleasesAtMinimum"
# Not named by the spec: a stored CR whose (runtime, type) pair has no adapter (or
# whose provider binding the adapter refuses). Admission rejects both today.
REASON_UNSUPPORTED_RUNTIME_PAIR: Final = "UnsupportedRuntimePair"
# Progressing=False while stuck: "False once converged (Synced), stuck (Degraded), or
# scaled to zero (ScaledToZero)".
REASON_DEGRADED: Final = "Degraded"
# Not named by the spec: the Ready/Degraded reason of a name conflict.
REASON_NAME_CONFLICT: Final = "NameConflict"

# The apiVersion of the reports `icache validate` and `icache doctor` print.
REPORT_API_VERSION: Final = "icache.inferencecache.io/v1"

# Event reasons.
EVENT_BACKEND_DEGRADED: Final = "BackendDegraded"
EVENT_BACKEND_RECOVERED: Final = "BackendRecovered"
EVENT_FAIL_CLOSED_ENABLED: Final = "FailClosedEnabled"
EVENT_FAIL_OPEN_RESTORED: Final = "FailOpenRestored"
EVENT_AWAITING_FIRST_KV_EVENT: Final = "AwaitingFirstKVEvent"
EVENT_KV_EVENTS_OBSERVED: Final = "KVEventsObserved"
EVENT_NO_KV_EVENTS_OBSERVED: Final = "NoKVEventsObserved"
EVENT_ENGINE_SELECTOR_UNMATCHED: Final = "EngineSelectorUnmatched"
EVENT_INJECTED_ENGINE_CRASH_LOOPING: Final = "InjectedEngineCrashLooping"
EVENT_LMCACHE_VERSION_SKEW: Final = "LMCacheVersionSkew"
EVENT_ENGINE_VERSION_BELOW_MINIMUM: Final = "EngineVersionBelowMinimum"
EVENT_INJECTED_BY_CACHE_BACKEND: Final = "InjectedByCacheBackend"
EVENT_SKIPPED_BY_OPERATOR: Final = "SkippedByOperator"
# Not named by the spec: the Warning Event of a name conflict (the condition reason is
# REASON_NAME_CONFLICT).
EVENT_NAME_CONFLICT: Final = "NameConflict"

# A managed workload that cannot create its pods (the API server refuses them: Pod
# Security, a quota, a LimitRange): the reason on Ready and Progressing, and the
# Warning Event on entering it.
REASON_POD_CREATION_FAILED: Final = "PodCreationFailed"
EVENT_POD_CREATION_FAILED: Final = "PodCreationFailed"

# The engines' own metrics: the webhook labels every pod it wires for the PodMonitor
# inference-cache-engines, and records the ports to scrape. metrics-port is the engine's
# own /metrics (vLLM's --port, with LMCache's in-process series; SGLang's --port when it
# runs with --enable-metrics); cache-metrics-port is the LMCache MP worker's
# --prometheus-port beside SGLang.
LABEL_METRICS: Final = "inferencecache.io/metrics"
LABEL_METRICS_ENGINE: Final = "engine"
ANNOTATION_METRICS_PORT: Final = "inferencecache.io/metrics-port"
ANNOTATION_CACHE_METRICS_PORT: Final = "inferencecache.io/cache-metrics-port"

# Host memory that fits: the engine processes the pod's host-memory budget was divided
# by (or why they could not be read), and the engine-side advisory condition, reason
# and Warning Event when an injected pod's container limit cannot hold what it pins.
ANNOTATION_HOST_MEMORY_PROCESSES: Final = "inferencecache.io/host-memory-processes"
COND_ENGINE_HOST_MEMORY: Final = "EngineHostMemory"
REASON_PINNED_HOST_MEMORY_OVER_LIMIT: Final = "PinnedHostMemoryOverLimit"
EVENT_PINNED_HOST_MEMORY_OVER_LIMIT: Final = "PinnedHostMemoryOverLimit"

# Cross-namespace consent: an owning backend names the namespaces whose consumer
# backends its managed tier admits (comma-separated namespace names).
ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: Final = "inferencecache.io/allowed-consumer-namespaces"
# Set by the API server on every namespace; a pod cannot forge it.
LABEL_NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"
REASON_CROSS_NAMESPACE_CONSENT_MISSING: Final = "CrossNamespaceConsentMissing"
REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING: Final = "CrossNamespaceCredentialsMissing"
EVENT_CROSS_NAMESPACE_REFUSED: Final = "CrossNamespaceAccessRefused"

# The engine's own KV offloading wins: a vLLM pod with --kv-offloading-size has its
# connector overwritten by vLLM (VllmConfig._post_init_kv_transfer_config), so the
# webhook admits it with its flags untouched and does not wire it. The pod records the
# decision and the backend that declined it; the worker counts such pods in an advisory
# condition (never gating Ready) with a Warning Event per transition.
ANNOTATION_INJECT_DECLINED: Final = "inferencecache.io/inject-declined"
ANNOTATION_INJECT_DECLINED_BY: Final = "inferencecache.io/inject-declined-by"
COND_ENGINE_OFFLOADING: Final = "EngineOffloading"
REASON_ENGINE_OFFLOADING_CONFLICT: Final = "EngineOffloadingConflict"
EVENT_ENGINE_OFFLOADING_CONFLICT: Final = "EngineOffloadingConflict"
# The Pod webhook's decision reasons (Prometheus label values) for a pod whose own KV
# configuration keeps it unwired.
WIRING_REASON_ENGINE_OFFLOADING: Final = "engine_offloading_conflict"
WIRING_REASON_KV_CONFIG_INVALID: Final = "kv_transfer_config_invalid"
WIRING_REASON_KV_CONNECTOR_UNREGISTERED: Final = "kv_connector_unregistered"
# An SGLang decode server of a prefill/decode pair runs without a radix cache (unless
# --disaggregation-decode-enable-radix-cache), so neither LMCache nor HiCache runs there.
WIRING_REASON_DISAGGREGATED_DECODE: Final = "disaggregated_decode_no_radix_cache"
# Type VLLMOffloading: an image tag naming a vLLM release without the /dev/shm CPU tier
# the wiring renders for (below 0.33.0); a /dev/shm the pod mounts that cannot hold the
# regions (too small, not memory-backed, read-only); engines per pod that cannot be read.
WIRING_REASON_ENGINE_RELEASE: Final = "engine_release_unsupported"
WIRING_REASON_DEV_SHM: Final = "dev_shm_unfit"
WIRING_REASON_PARALLELISM_UNREADABLE: Final = "engine_parallelism_unreadable"
# The wiring decision of a VLLMOffloading pod: per-engine bytes x engines, the policy,
# the /dev/shm, and the vLLM release read from the image tag (or a note that none was).
ANNOTATION_VLLM_OFFLOADING: Final = "inferencecache.io/vllm-offloading"
