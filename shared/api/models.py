"""Pydantic v2 models of the CacheBackend API (inferencecache.io/v1alpha1).

Every optional field defaults to ``None`` so an omitted object stays omitted when
dumped with :func:`dump` (Go pointer semantics): a manifest round-trips unchanged.
The literal defaults the API server stamps are declared as ``crd_default`` metadata
and emitted into the generated CRD (see ``shared.api.crd``); code that needs an
effective value reads it through ``shared.api.effective``.

Field descriptions are what ``kubectl explain`` shows; they are written for the
platform engineer reading them there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from shared.api.duration import GO_DURATION_PATTERN

# A Kubernetes resource.Quantity: an integer or a string such as "250m" or "4Gi".
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]

# An opaque Kubernetes object we pass through untouched (affinity, securityContext, ...).
OpaqueObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

# A metav1.Time: an RFC 3339 timestamp.
Time = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]

# A Go time.Duration string such as "5m", "90s", "1h30m" or "0": exactly the grammar
# of Go's time.ParseDuration (sign included; the webhook rejects negative timeouts).
DURATION_PATTERN = GO_DURATION_PATTERN

Runtime = Literal["VLLM", "SGLang"]
CacheType = Literal["LMCache", "SGLangHiCache", "VLLMOffloading"]
Provider = Literal["Redis", "LMCacheServer", "Mooncake"]
Ownership = Literal["Managed", "External"]
IntegrationMode = Literal["Offload", "EventsOnly"]
IntegrationRole = Literal["ReadOnly", "WriteOnly", "ReadWrite"]
DeploymentKind = Literal["Deployment", "StatefulSet"]
EvictionPolicy = Literal["LRU", "ARC"]
HiCacheWritePolicy = Literal["write_back", "write_through", "write_through_selective"]
HiCacheIOBackend = Literal["direct", "kernel", "kernel_ascend"]
HiCacheMemoryLayout = Literal[
    "layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"
]


def crd_default(value: Any) -> dict[str, Any]:
    """Mark a literal default the API server stamps (a +kubebuilder:default= marker)."""
    return {"crd_default": value}


class APIModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=False,
    )


# --------------------------------------------------------------------------- spec


class HostMemory(APIModel):
    capacity: Quantity | None = Field(
        None,
        description=(
            "Host-memory (CPU RAM) budget for the LMCache L1 tier, a positive quantity such as "
            "32Gi. Defaults to 4Gi. vLLM: sizes LMCACHE_MAX_LOCAL_CPU_SIZE; SGLang: rendered to "
            "the MP worker's whole-GiB L1 allocation and the /dev/shm emptyDir size."
        ),
    )


class LMCacheConfig(APIModel):
    chunk_size_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "LMCache chunk size in tokens. Defaults to 256. vLLM: LMCACHE_CHUNK_SIZE; SGLang: "
            "the MP worker's --chunk-size and the config file's chunk_size."
        ),
    )
    host_memory: HostMemory | None = Field(
        None, description="Host-memory (L1) tier configuration of the LMCache engine cache."
    )
    worker_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description=(
            "Loopback ZMQ port the SGLang engine and its node-local LMCache MP worker share. "
            "Defaults to 5555."
        ),
    )
    worker_image: str | None = Field(
        None,
        description=(
            "Image of the SGLang LMCache MP-worker sidecar. Defaults to the engine container's "
            "own image."
        ),
    )
    remote_serde: str | None = Field(
        None,
        description=(
            "Serializer LMCache uses for the remote tier (LMCACHE_REMOTE_SERDE), for example "
            "naive or cachegen. Unset means naive: with a remote binding the engine env always "
            "names the serializer, never relying on LMCache's own default."
        ),
    )


class ResourceClaim(APIModel):
    name: str = Field(description="Name of a pod-level resourceClaims entry (DRA).")
    request: str | None = Field(None, description="Request name within the claim.")


class ResourceRequirements(APIModel):
    limits: dict[str, Quantity] | None = Field(
        None, description="Maximum amount of compute resources allowed (corev1 limits)."
    )
    requests: dict[str, Quantity] | None = Field(
        None, description="Minimum amount of compute resources required (corev1 requests)."
    )
    claims: list[ResourceClaim] | None = Field(
        None,
        description=(
            "Dynamic Resource Allocation claims. Not supported yet: a non-empty list is "
            "rejected at admission (rejectResourceClaims)."
        ),
    )


_RESOURCES_DESCRIPTION = (
    "corev1.ResourceRequirements deep-copied onto the managed container. Omitted: a bounded "
    "4Gi memory request / 8Gi limit (not persisted into the CR); an explicit {} suppresses "
    "that default. With spec.autoscaling a 250m CPU request is filled in when requests.cpu is "
    "absent or non-positive."
)


class RedisProvider(APIModel):
    image: str | None = Field(
        None,
        description="Redis image for the managed workload. Defaults to a pinned Redis 7 image.",
    )
    resources: ResourceRequirements | None = Field(
        None,
        description=_RESOURCES_DESCRIPTION
        + " The memory limit also sizes --maxmemory at about 80% with allkeys-lru.",
    )


class LMCacheServerProvider(APIModel):
    image: str | None = Field(
        None,
        description=(
            "Standalone LMCache server image. Defaults to the pinned lmcache/standalone:v0.4.7, "
            "never :latest; keep it wire-compatible with the engine's lmcache client."
        ),
    )
    command: list[str] | None = Field(
        None, description="Command and arguments of the LMCache server container."
    )
    resources: ResourceRequirements | None = Field(None, description=_RESOURCES_DESCRIPTION)


class MooncakeProvider(APIModel):
    image: str | None = Field(
        None,
        description=(
            "Mooncake master image. Defaults to the pinned, fully qualified "
            "docker.io/kvcacheai/mooncake:0.3.11.post1."
        ),
    )
    command: list[str] | None = Field(
        None,
        description=(
            "Master command and arguments. Defaults to mooncake_master --rpc_port=50051 "
            "--metrics_port=9003 --enable_http_metadata_server=true "
            "--http_metadata_server_host=0.0.0.0 --http_metadata_server_port=8080. Do not change "
            "the RPC (50051) or HTTP metadata (8080) ports."
        ),
    )
    resources: ResourceRequirements | None = Field(None, description=_RESOURCES_DESCRIPTION)


class RemoteStorage(APIModel):
    provider: Provider | None = Field(
        None, description="Remote-tier technology: Redis, LMCacheServer, or Mooncake."
    )
    ownership: Ownership | None = Field(
        None,
        description=(
            "Managed: the controller provisions the provider workload and Service. External: "
            "the operator runs it and supplies spec.remoteStorage.endpoint."
        ),
    )
    endpoint: str | None = Field(
        None,
        description=(
            "Required for External, rejected for Managed (managed endpoints are observed in "
            "status.endpoint). Bare host:port works for every provider; LMCacheServer also "
            "accepts lm://host:port, Mooncake also accepts mooncakestore://host:port; Redis "
            "accepts only bare host:port. A numeric port in 1-65535 is required."
        ),
    )
    redis: RedisProvider | None = Field(
        None, description="Redis-owned image and resource configuration."
    )
    lm_cache_server: LMCacheServerProvider | None = Field(
        None,
        description="Standalone LMCache-server-owned image, command, and resource configuration.",
    )
    mooncake: MooncakeProvider | None = Field(
        None, description="Mooncake-owned image, command, and resource configuration."
    )


class Observation(APIModel):
    model_id: str | None = Field(
        None,
        alias="modelID",
        description=(
            "Model identity the kvevent-subscriber reports (--model-id) and the functional "
            "probe uses. Without it no subscriber sidecar is injected."
        ),
    )
    first_event_timeout: str | None = Field(
        None,
        pattern=DURATION_PATTERN,
        description=(
            "How long after the backend is up the KV-event readiness gate waits for the first "
            "KV event before reporting Degraded/NoKVEventsObserved. A Go duration such as 5m, "
            "90s or 1h30m; 0 means no grace period (Degraded as soon as the backend is up, "
            "until the first event). Must not be negative."
        ),
        json_schema_extra=crd_default("5m"),
    )


class Autoscaling(APIModel):
    min_replicas: int | None = Field(
        None,
        ge=1,
        description=(
            "Lower bound for the HPA replica count. Defaulted to spec.replicas on first apply "
            "only; later edits of spec.replicas do not move it."
        ),
    )
    max_replicas: int = Field(
        ge=1, description="Upper bound for the HPA replica count. Must be >= minReplicas."
    )
    target_cpu_utilization_percent: int | None = Field(
        None,
        alias="targetCPUUtilizationPercent",
        ge=1,
        le=100,
        description="Target average per-pod CPU utilization for the HPA. Defaults to 80 when unset.",
    )


class EnvVar(APIModel):
    name: str = Field(description="Name of the environment variable.")
    value: str | None = Field(None, description="Value of the environment variable.")
    value_from: OpaqueObject | None = Field(
        None, description="Source for the variable's value (corev1.EnvVarSource)."
    )


class EngineOverrides(APIModel):
    args: list[str] | None = Field(
        None,
        description=(
            "Args amending the adapter-injected engine args: an entry whose leading flag matches "
            "an adapter-owned arg replaces it; a new flag is appended; a flag the user's pod "
            "template owns is left alone. Known-fragile: values the validator cannot judge can "
            "still break the engine."
        ),
    )
    suppress_args: list[str] | None = Field(
        None, description="Leading flag names the adapter must not inject (adapter-owned only)."
    )
    env: list[EnvVar] | None = Field(
        None,
        description=(
            "Env upserted by name over the adapter-injected env; user-owned env is protected. "
            "Known-fragile: values the validator cannot judge can still break the engine."
        ),
    )
    suppress_env: list[str] | None = Field(
        None, description="Env var names the adapter must not inject (adapter-owned only)."
    )


class Integration(APIModel):
    mode: IntegrationMode | None = Field(
        None,
        description=(
            "Offload: cache-aware routing plus the KV-offload connector. EventsOnly: routing "
            "only (the kvevent-subscriber sidecar, no connector, no provider workload)."
        ),
        json_schema_extra=crd_default("Offload"),
    )
    role: IntegrationRole | None = Field(
        None,
        description=(
            "Engine participation: ReadOnly (kv_consumer), WriteOnly (kv_producer) or ReadWrite "
            "(kv_both). SGLang with LMCache supports only ReadWrite."
        ),
        json_schema_extra=crd_default("ReadWrite"),
    )
    fail_open: bool | None = Field(
        None,
        description=(
            "When true engine pods fall back to local prefill if the cache is unreachable. "
            "false opts into fail-closed serving and raises a Warning FailClosedEnabled Event."
        ),
        json_schema_extra=crd_default(True),
    )
    engine_overrides: EngineOverrides | None = Field(
        None,
        description=(
            "Overrides of the non-reserved args/env the Pod webhook injects into the engine "
            "container. Reserved flags/env of the runtime adapter are rejected."
        ),
    )
    engine_host_network: bool | None = Field(
        None,
        description=(
            "Mooncake only: move matched engine pods onto the host network (hostNetwork + "
            "dnsPolicy ClusterFirstWithHostNet) together with the connector. Rejected where not "
            "needed."
        ),
    )


class EngineSelector(APIModel):
    match_labels: dict[str, str] | None = Field(
        None,
        description=(
            "Equality-based selector matched against engine pod labels. Nil or empty never "
            "matches any pod."
        ),
    )


class HiCache(APIModel):
    ratio: str | None = Field(
        None,
        description=(
            "--hicache-ratio: host-to-device KV pool ratio, a string with a finite number "
            "greater than zero. Exactly one of ratio and sizeGB."
        ),
    )
    size_gb: int | None = Field(
        None,
        alias="sizeGB",
        ge=1,
        description="--hicache-size in GB, a positive integer. Exactly one of ratio and sizeGB.",
    )
    write_policy: HiCacheWritePolicy | None = Field(
        None, description="--hicache-write-policy; omitted leaves the SGLang default."
    )
    io_backend: HiCacheIOBackend | None = Field(
        None,
        alias="ioBackend",
        description="--hicache-io-backend; omitted leaves the SGLang default.",
    )
    memory_layout: HiCacheMemoryLayout | None = Field(
        None, description="--hicache-mem-layout; omitted leaves the SGLang default."
    )


class VLLMOffloadingCPU(APIModel):
    capacity: Quantity | None = Field(
        None,
        description=(
            "Host memory (CPU RAM) the CPU tier may hold in one engine pod, whatever its "
            "parallelism, a positive quantity such as 64Gi. Required. Divided evenly over the "
            "pod's data-parallel engines (OffloadingConnector cpu_bytes_to_use per engine); "
            "the regions live in a memory-backed /dev/shm emptyDir the webhook mounts, which "
            "counts against the engine container's memory limit."
        ),
    )


class VLLMOffloading(APIModel):
    cpu: VLLMOffloadingCPU | None = Field(
        None, description="The CPU tier of vLLM's built-in KV offloading."
    )
    eviction_policy: EvictionPolicy | None = Field(
        None,
        description=(
            "Eviction policy of the CPU tier: LRU or ARC, vLLM's built-in policies "
            "(OffloadingConnector eviction_policy lru / arc). Defaults to LRU."
        ),
        json_schema_extra=crd_default("LRU"),
    )


class ImagePullSecret(APIModel):
    name: str | None = Field(None, description="Name of a Secret in the CacheBackend namespace.")


class TemplateOverrides(APIModel):
    node_selector: dict[str, str] | None = Field(
        None, description="nodeSelector for managed backend pods."
    )
    affinity: OpaqueObject | None = Field(None, description="Affinity for managed backend pods.")
    tolerations: list[OpaqueObject] | None = Field(
        None, description="Tolerations for managed backend pods."
    )
    topology_spread_constraints: list[OpaqueObject] | None = Field(
        None, description="Topology spread constraints for managed backend pods."
    )
    image_pull_secrets: list[ImagePullSecret] | None = Field(
        None, description="Image pull secrets for managed backend pods."
    )
    service_account_name: str | None = Field(
        None, description="ServiceAccount the managed backend pods run as."
    )
    security_context: OpaqueObject | None = Field(
        None, description="Pod-level securityContext for managed backend pods."
    )
    priority_class_name: str | None = Field(
        None, description="PriorityClass of managed backend pods."
    )
    scheduler_name: str | None = Field(None, description="Scheduler of managed backend pods.")
    runtime_class_name: str | None = Field(
        None, description="RuntimeClass of managed backend pods."
    )
    termination_grace_period_seconds: int | None = Field(
        None, ge=0, description="Termination grace period of managed backend pods, in seconds."
    )


class CacheBackendSpec(APIModel):
    runtime: Runtime = Field(
        description="Required inference runtime: VLLM or SGLang. Values are case-sensitive."
    )
    type: CacheType | None = Field(
        None,
        description=(
            "Engine-side cache implementation: LMCache, SGLangHiCache or VLLMOffloading. Remote "
            "technology is chosen by remoteStorage.provider, lifecycle by remoteStorage.ownership."
        ),
        json_schema_extra=crd_default("LMCache"),
    )
    lm_cache: LMCacheConfig | None = Field(
        None,
        description=(
            "Typed LMCache engine configuration: chunk size, host-memory capacity, MP-worker "
            "image/port, and remote serde. Only with type LMCache."
        ),
    )
    remote_storage: RemoteStorage | None = Field(
        None,
        description=(
            "Optional remote tier. Omitting it means host-only and provisions no provider workload."
        ),
    )
    observation: Observation | None = Field(
        None, description="Observation-owned modelID and firstEventTimeout."
    )
    deployment_kind: DeploymentKind | None = Field(
        None,
        description="Managed workload kind: Deployment or StatefulSet.",
        json_schema_extra=crd_default("Deployment"),
    )
    replicas: int | None = Field(
        None,
        ge=0,
        description="Desired managed backend replicas. 0 scales the managed workload to zero.",
        json_schema_extra=crd_default(1),
    )
    autoscaling: Autoscaling | None = Field(
        None,
        description=(
            "HorizontalPodAutoscaler (autoscaling/v2, CPU) for the managed workload. Only with "
            "managed remote storage."
        ),
    )
    integration: Integration | None = Field(
        None, description="Engine integration policy: mode, role, fail-open, overrides."
    )
    engine_selector: EngineSelector | None = Field(
        None,
        description=(
            "Selects the engine pods (by pod-template labels) the Pod webhook wires to this "
            "backend. The first matching CacheBackend by name wins."
        ),
    )
    hi_cache: HiCache | None = Field(
        None,
        description="Typed SGLang native HiCache configuration. Required for type SGLangHiCache.",
    )
    vllm_offloading: VLLMOffloading | None = Field(
        None,
        alias="vllmOffloading",
        description=(
            "vLLM's built-in CPU KV offloading (OffloadingConnector): cpu.capacity per engine "
            "pod and evictionPolicy. Required for type VLLMOffloading (runtime VLLM only)."
        ),
    )
    template: TemplateOverrides | None = Field(
        None,
        description=(
            "Narrow pod-level overrides for managed backend pods (scheduling, identity, "
            "security). Containers always come from controller defaults."
        ),
    )
    allow_cross_namespace: bool | None = Field(
        None,
        description=(
            "Allow spec.remoteStorage.endpoint to name a Service in another namespace. Defaults "
            "to false."
        ),
    )


# ------------------------------------------------------------------------- status


class Condition(APIModel):
    type: str = Field(description="Condition type: Ready, Degraded, Progressing, ...")
    status: Literal["True", "False", "Unknown"] = Field(
        description="Status of the condition: True, False, or Unknown."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation the condition was set for."
    )
    last_transition_time: Time = Field(
        description="Last time the condition changed status (RFC 3339)."
    )
    reason: str = Field(description="Machine-readable CamelCase reason for the last transition.")
    message: str = Field(description="Human-readable detail of the last transition.")


class IndexParticipation(APIModel):
    prefix_count: int | None = Field(
        None,
        ge=0,
        description="Distinct prefix entries attributed to this backend's replicas (0 is valid).",
    )
    last_event_at: Time | None = Field(
        None,
        description="Most recent KV-event timestamp of any replica; unset until the first event.",
    )
    hit_rate: str | None = Field(
        None, description="Reserved; always unset today. Absent must not be read as 0."
    )
    t2_hit_rate: str | None = Field(
        None,
        alias="t2HitRate",
        description=(
            "Query-weighted tier-2 reload hit rate in [0,1]. Unset: tier-2 never queried; 0: "
            "queried but never served a reload."
        ),
    )


class CacheBackendStatus(APIModel):
    endpoint: str | None = Field(
        None,
        description=(
            "Observed endpoint clients use: the rendered Service for Managed, the trimmed spec "
            "endpoint for External, empty for host-only and events-only."
        ),
    )
    matched_engine_pods: int | None = Field(
        None,
        ge=0,
        description=(
            "Pods in the namespace matching spec.engineSelector at the last reconcile. Unset "
            "without a non-empty selector."
        ),
    )
    engine_selector_message: str | None = Field(
        None,
        description="Diagnosis when the selector matches no pod while engine pods are expected.",
    )
    fail_open: bool | None = Field(
        None, description="Observed echo of the effective spec.integration.failOpen."
    )
    index_participation: IndexParticipation | None = Field(
        None,
        description="This backend's slice of the cluster-wide cache index, from the /snapshot poller.",
    )
    first_kv_event_observed_at: Time | None = Field(
        None,
        alias="firstKVEventObservedAt",
        description="Write-once latch: when the KV-event gate first observed an event.",
    )
    first_available_at: Time | None = Field(
        None,
        description=(
            "Write-once anchor of the firstEventTimeout clock: first Available (managed) or "
            "first reconcile (events-only); re-anchored on a mode change."
        ),
    )
    observed_server_instance: str | None = Field(
        None,
        description="Cascade baseline: <pod-uid>:<restart-sum> per Ready cache-server pod.",
    )
    observed_generation: int | None = Field(
        None, description="The .metadata.generation last reconciled by the controller."
    )
    conditions: list[Condition] | None = Field(
        None, description="Kubernetes conditions keyed by type (Ready, Degraded, Progressing, ...)."
    )


class ObjectMeta(APIModel):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class CacheBackend(APIModel):
    api_version: str | None = "inferencecache.io/v1alpha1"
    kind: str | None = "CacheBackend"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: CacheBackendSpec
    status: CacheBackendStatus | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    """Wire form: camelCase, only what was set (omitted optional objects stay omitted)."""
    return model.model_dump(by_alias=True, exclude_unset=True, mode="json")
