"""CacheBackend admission, case by case from the spec (docs/api.md), over HTTP.

Every AdmissionReview below goes through the real FastAPI app (the routes `icache
webhook --insecure --backends-from manifests/samples` serves) exactly as a replay with
curl would: raw manifests without the API server's defaults, CREATE / UPDATE (with and
without oldObject) / DELETE, dryRun, requests with and without a namespace, missing
fields, wrong types, nulls, unknown fields, odd values. Each case id names the spec
sentence it checks.

For the validating route a denial must be the API server's own Invalid status (422,
reason Invalid) whose causes are exactly the expected field set, each field also
named in status.message; warnings are checked on every answer. For the mutating route
the decoded JSONPatch must apply cleanly, give the expected object, touch only what
changes, and be idempotent (mutating the mutated object yields no patch).
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest
from fastapi.testclient import TestClient

from shared.runtime_adapters import registry
from shared.runtime_adapters.base import InjectContext
from tests.builders import REVIEW_UID, cb, external, managed
from tests.builders import cachebackend_review as review
from tests.samples import SAMPLES_DIR, sample_backends
from webhook_svc.app import PATH_MUTATE_CB, PATH_VALIDATE_CB, create_app
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource

NS = "team-a"
UID = REVIEW_UID


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = create_app(FileBackendSource(SAMPLES_DIR, load_backends), InjectContext())
    return TestClient(app)


def post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    http = client.post(path, json=body)
    assert http.status_code == 200, http.text
    out = http.json()
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    resp: dict[str, Any] = out["response"]
    assert resp["uid"] == UID
    return resp


def patch_of(resp: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in resp:
        return []
    assert resp["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(resp["patch"]))
    return ops


def fields(resp: dict[str, Any]) -> list[str]:
    return [c["field"] for c in resp.get("status", {}).get("details", {}).get("causes", [])]


# ------------------------------------------------------------------- building blocks

VLLM = {"runtime": "VLLM"}
SGLANG = {"runtime": "SGLang"}
HICACHE = {
    "runtime": "SGLang",
    "type": "SGLangHiCache",
    "engineSelector": {"matchLabels": {"app": "sglang"}},
    "hiCache": {"ratio": "2.0"},
}
EVENTS_ONLY = {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}
HOST_NETWORK = {"engineHostNetwork": True}


MANAGED_LMCACHE = {**VLLM, "remoteStorage": managed("LMCacheServer")}
MANAGED_REDIS = {**SGLANG, "remoteStorage": managed("Redis")}
MOONCAKE = {**VLLM, "remoteStorage": managed("Mooncake"), "integration": HOST_NETWORK}


def resources(provider: str, block: dict[str, Any]) -> dict[str, Any]:
    """A managed provider (on the runtime that dials it) carrying ``block`` as resources."""
    wire = {"Redis": "redis", "LMCacheServer": "lmCacheServer", "Mooncake": "mooncake"}[provider]
    spec: dict[str, Any] = {
        "runtime": "SGLang" if provider == "Redis" else "VLLM",
        "remoteStorage": managed(provider, **{wire: {"resources": block}}),
    }
    if provider == "Mooncake":
        spec["integration"] = HOST_NETWORK
    return spec


def res_path(provider: str, rest: str) -> str:
    wire = {"Redis": "redis", "LMCacheServer": "lmCacheServer", "Mooncake": "mooncake"}[provider]
    return f"spec.remoteStorage.{wire}.resources.{rest}"


KERNEL_CHECK = "inferencecache.io/lmcache-kernel-check"
MOONCAKE_WARNING = "spec.integration.engineHostNetwork=true"


# ============================================================ validating: the table


@dataclass
class Case:
    """One AdmissionReview for the validating route and what the spec says of it."""

    obj: Any
    fields: list[str] = field(default_factory=list)  # exact cause fields; [] = allowed
    contains: tuple[str, ...] = ()  # substrings of status.message
    warns: tuple[str, ...] = ()  # substrings the single warning must carry (() = none)
    operation: str = "CREATE"
    old: Any = None
    namespace: str | None = NS
    create_only: bool = False  # the violation needs the CREATE-only minReplicas default


def case(case_id: str, obj: Any, *expected_fields: str, **kw: Any) -> Any:
    return pytest.param(Case(obj, list(expected_fields), **kw), id=case_id)


VALID_CASES = [
    # --- Cache hierarchy and ownership
    case("hierarchy: omitting remoteStorage is meaningful (host-only vLLM)", cb(VLLM)),
    case(
        "hierarchy: SGLang -> LMCache host memory only (spec example)",
        cb({**SGLANG, "type": "LMCache", "lmCache": {"hostMemory": {"capacity": "32Gi"}}}),
    ),
    case(
        "hierarchy: the canonical SGLang + LMCache + managed Redis example",
        cb(
            {
                "runtime": "SGLang",
                "type": "LMCache",
                "lmCache": {"chunkSizeTokens": 256, "hostMemory": {"capacity": "32Gi"}},
                "remoteStorage": {
                    "provider": "Redis",
                    "ownership": "Managed",
                    "redis": {
                        "image": "docker.io/library/redis:7.4-alpine",
                        "resources": {"limits": {"memory": "8Gi"}},
                    },
                },
                "observation": {"modelID": "Qwen/Qwen3"},
            }
        ),
    ),
    case("binding: vLLM + managed LMCacheServer (lm)", cb(MANAGED_LMCACHE)),
    case(
        "endpoint: LMCacheServer also accepts lm://host:port",
        cb({**VLLM, "remoteStorage": external("LMCacheServer", "lm://lmcache.example.com:65432")}),
    ),
    case(
        "endpoint: bare host:port is portable across all providers (LMCacheServer)",
        cb({**VLLM, "remoteStorage": external("LMCacheServer", "lmcache:65432")}),
    ),
    case(
        "endpoint: Mooncake also accepts mooncakestore://host:port",
        cb(
            {
                **VLLM,
                "remoteStorage": external("Mooncake", "mooncakestore://10.0.12.7:50051"),
                "integration": HOST_NETWORK,
            }
        ),
    ),
    case(
        "endpoint: Redis accepts bare host:port (SGLang RESP binding)",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.example.internal:6379")}),
    ),
    case(
        "endpoint: IPv6 must be bracketed (bracketed is fine)",
        cb({**SGLANG, "remoteStorage": external("Redis", "[fd00::12]:6379")}),
    ),
    case(
        "endpoint: the endpoint is trimmed (surrounding spaces are not embedded whitespace)",
        cb({**SGLANG, "remoteStorage": external("Redis", "  redis.example.com:6379  ")}),
    ),
    case(
        "endpoint ownership: whitespace-only values are treated as empty (Managed)",
        cb({**SGLANG, "remoteStorage": managed("Redis", endpoint="   ")}),
    ),
    case(
        "cross-namespace: allowCrossNamespace opts in",
        cb(
            {
                **VLLM,
                "remoteStorage": external("LMCacheServer", "lm://lmcache.cache-infra.svc:65432"),
                "allowCrossNamespace": True,
            }
        ),
    ),
    case(
        "cross-namespace: a Service in the CacheBackend's own namespace",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.team-a.svc.cluster.local:6379")}),
    ),
    case(
        "cross-namespace: external hostnames and IPs are unaffected",
        cb({**SGLANG, "remoteStorage": external("Redis", "cache.prod.example.com:6379")}),
    ),
    case(
        "cross-namespace: a two-label Service name in the own namespace",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.team-a:6379")}),
    ),
    case(
        "cross-namespace: IPs are unaffected",
        cb({**SGLANG, "remoteStorage": external("Redis", "10.1.2.3:6379")}),
    ),
    case(
        "cross-namespace: request namespace is the CacheBackend's namespace",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.team-b.svc:6379")}),
        namespace="team-b",
    ),
    case(
        "request without namespace: metadata.namespace is used",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.team-a.svc:6379")}),
        namespace=None,
    ),
    # --- Mooncake
    case("mooncake: replicas 1 (the singleton) with engineHostNetwork", cb(MOONCAKE)),
    case("mooncake: spec.replicas: 0 (disabled) remains valid", cb({**MOONCAKE, "replicas": 0})),
    # --- HiCache
    case(
        "hicache: the required integration shape with the typed pass-through",
        cb(
            {
                **HICACHE,
                "hiCache": {
                    "ratio": "2.0",
                    "writePolicy": "write_through",
                    "ioBackend": "kernel",
                    "memoryLayout": "layer_first",
                },
            }
        ),
    ),
    case("hicache: sizeGB is a positive integer", cb({**HICACHE, "hiCache": {"sizeGB": 64}})),
    case(
        "hicache: ratio in exponent form is a finite number > 0",
        cb({**HICACHE, "hiCache": {"ratio": "1e-1"}}),
    ),
    # --- events-only
    case(
        "events-only: routing only, type defaults to LMCache",
        cb({**EVENTS_ONLY, "observation": {"modelID": "Qwen/Qwen3-Next-80B-A3B-Instruct"}}),
    ),
    case(
        "events-only: mode wins over host-tier configuration (lmCache is ignored, not rejected)",
        cb({**SGLANG, "integration": {"mode": "EventsOnly"}, "lmCache": {"chunkSizeTokens": 64}}),
    ),
    case(
        "events-only: spec.replicas is not server-shaped configuration",
        cb({**EVENTS_ONLY, "replicas": 3}),
    ),
    # --- replicas / autoscaling
    case(
        "autoscaling: managed workload, minReplicas defaulted from replicas on CREATE",
        cb(
            {
                **MANAGED_LMCACHE,
                "replicas": 2,
                "autoscaling": {"maxReplicas": 6, "targetCPUUtilizationPercent": 70},
            }
        ),
    ),
    case(
        "autoscaling: replicas 0 with an explicit minReplicas",
        cb({**MANAGED_LMCACHE, "replicas": 0, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}),
    ),
    case(
        "autoscaling: minReplicas == maxReplicas",
        cb({**MANAGED_LMCACHE, "autoscaling": {"minReplicas": 3, "maxReplicas": 3}}),
    ),
    case("replicas: 0 without autoscaling scales to zero", cb({**MANAGED_LMCACHE, "replicas": 0})),
    # --- observation.firstEventTimeout takes exactly Go's duration grammar (docs/decisions.md)
    *[
        case(
            f"firstEventTimeout: {value!r} is a Go duration",
            cb({**VLLM, "observation": {"firstEventTimeout": value}}),
        )
        for value in ("0", "0s", "1h30m", "1.5h", "90s")
    ],
    # --- engine overrides
    case(
        "overrides: LMCACHE_CHUNK_SIZE / SERDE / LOCAL_CPU / MAX_LOCAL_CPU_SIZE are NOT reserved",
        cb(
            {
                **VLLM,
                "integration": {
                    "engineOverrides": {
                        "args": ["--max-model-len=8192", "--kv-cache-dtype", "fp8"],
                        "suppressArgs": ["--enforce-eager"],
                        "env": [
                            {"name": "LMCACHE_CHUNK_SIZE", "value": "512"},
                            {"name": "LMCACHE_LOCAL_CPU", "value": "False"},
                        ],
                        "suppressEnv": ["LMCACHE_REMOTE_SERDE", "LMCACHE_MAX_LOCAL_CPU_SIZE"],
                    }
                },
            }
        ),
    ),
    case(
        "overrides: for SGLang, LMCACHE_REMOTE_URL / VLLM_USE_V1 / PYTHONHASHSEED are not reserved",
        cb(
            {
                **SGLANG,
                "integration": {
                    "engineOverrides": {
                        "args": ["--kv-transfer-config={}"],
                        "env": [{"name": "LMCACHE_REMOTE_URL", "value": "x"}],
                        "suppressEnv": ["VLLM_USE_V1", "PYTHONHASHSEED"],
                    }
                },
            }
        ),
    ),
    case(
        "role: vLLM maps ReadOnly onto kv_consumer",
        cb({**VLLM, "integration": {"role": "ReadOnly", "failOpen": False}}),
    ),
    # --- annotations
    *[
        case(
            f"kernel-check annotation value {value!r} is accepted",
            cb(VLLM, annotations={KERNEL_CHECK: value}),
        )
        for value in ("auto", "report-only", "strict", "off", "")
    ],
    # --- resources
    case(
        "resources: requests.cpu '0' is a valid kubelet shape",
        cb(resources("LMCacheServer", {"requests": {"cpu": "0", "memory": "0"}})),
    ),
    case(
        "resources: limits-only shapes admit unchanged for any resource",
        cb(resources("Redis", {"limits": {"nvidia.com/gpu": 1, "hugepages-2Mi": "4Mi"}})),
    ),
    case(
        "resources: requests-only is admitted for cpu, memory, ephemeral-storage",
        cb(resources("Mooncake", {"requests": {"cpu": "250m", "ephemeral-storage": "1Gi"}})),
    ),
    case(
        "resources: non-overcommittable requests == limits; overcommittable limits >= requests",
        cb(
            resources(
                "LMCacheServer",
                {
                    "requests": {"cpu": "500m", "memory": "1Gi", "example.com/fpga": "2"},
                    "limits": {"cpu": "1", "memory": "1024Mi", "example.com/fpga": 2},
                },
            )
        ),
    ),
    case(
        "resources: an explicit empty provider resources: {} suppresses the default",
        cb(resources("Redis", {})),
    ),
    case(
        "resources: a nil/empty claims slice admits unchanged",
        cb(resources("Redis", {"claims": []})),
    ),
    # --- shape tolerance
    case(
        "unknown fields are pruned, not rejected (only the removed ones are)",
        cb(
            {
                **MANAGED_REDIS,
                "someFutureField": {"x": 1},
                "integration": {"futureKnob": True},
                "remoteStorage": managed("Redis", redis={"futureKnob": 1}),
            },
            labels={"team": "infra"},
        ),
    ),
    case(
        "nulls mean unset (remoteStorage, autoscaling, integration, replicas)",
        cb(
            {
                **VLLM,
                "remoteStorage": None,
                "autoscaling": None,
                "integration": None,
                "replicas": None,
                "lmCache": {"hostMemory": None},
            }
        ),
    ),
    case(
        "unicode values where the API allows strings",
        cb(
            {
                **VLLM,
                "observation": {"modelID": "模型/Qwen3-8B-ñ"},
                "engineSelector": {"matchLabels": {"app": "vllm"}},
            },
            annotations={"note": "résumé ✓"},
        ),
    ),
    case(
        "template: partial pod-level overrides",
        cb(
            {
                **MANAGED_REDIS,
                "deploymentKind": "StatefulSet",
                "template": {
                    "nodeSelector": {"node-pool": "cache"},
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    "terminationGracePeriodSeconds": 0,
                },
            }
        ),
    ),
    case(
        "already API-server-defaulted object is valid",
        cb(
            {
                **MANAGED_LMCACHE,
                "type": "LMCache",
                "deploymentKind": "Deployment",
                "replicas": 1,
                "integration": {"mode": "Offload", "role": "ReadWrite", "failOpen": True},
                "observation": {"firstEventTimeout": "5m"},
            }
        ),
    ),
]


INVALID_CASES = [
    # --- Cache type validation / schema
    case(
        "type: the old type: Mooncake spelling is rejected",
        cb({**VLLM, "type": "Mooncake"}),
        "spec.type",
        contains=('Unsupported value: "Mooncake"', '"LMCache", "SGLangHiCache"'),
    ),
    case(
        "type: the old type: External spelling is rejected",
        cb({**VLLM, "type": "External"}),
        "spec.type",
    ),
    case("runtime: required", cb({"type": "LMCache"}), "spec.runtime"),
    case("runtime: null is unset, so Required", cb({"runtime": None}), "spec.runtime"),
    case(
        "runtime: values are case-sensitive",
        cb({"runtime": "vllm"}),
        "spec.runtime",
        contains=('"VLLM", "SGLang"',),
    ),
    case(
        "runtime/cache pair must be supported; SupportedPairs in the rejection",
        cb({**HICACHE, "runtime": "VLLM"}),
        "spec.type",
        contains=tuple(registry.supported_pairs()),
    ),
    case("spec: missing", cb(no_spec=True), "spec", contains=("spec: Required value",)),
    case("spec: null", cb(None), "spec"),
    case("spec: not an object", cb("LMCache"), "spec", contains=("must be of type object",)),
    case("spec: a list", cb([VLLM]), "spec"),
    case(
        "replicas: Minimum 0",
        cb({**VLLM, "replicas": -1}),
        "spec.replicas",
        contains=("greater than or equal to 0",),
    ),
    case(
        "wrong types: string replicas, bool-as-string, int label value",
        cb(
            {
                **VLLM,
                "replicas": "3",
                "allowCrossNamespace": "yes",
                "integration": {"failOpen": "false"},
                "engineSelector": {"matchLabels": {"app": 1}},
            }
        ),
        "spec.replicas",
        "spec.allowCrossNamespace",
        "spec.integration.failOpen",
        "spec.engineSelector.matchLabels[app]",
    ),
    case(
        "autoscaling: maxReplicas required when autoscaling is set",
        cb({**MANAGED_LMCACHE, "autoscaling": {"maxReplicas": None}}),
        "spec.autoscaling.maxReplicas",
    ),
    case(
        "autoscaling: targetCPUUtilizationPercent range [1, 100]",
        cb(
            {
                **MANAGED_LMCACHE,
                "autoscaling": {"maxReplicas": 2, "targetCPUUtilizationPercent": 101},
            }
        ),
        "spec.autoscaling.targetCPUUtilizationPercent",
    ),
    case(
        "reject_negative_first_event_timeout: -1s",
        cb({**VLLM, "observation": {"firstEventTimeout": "-1s"}}),
        "spec.observation.firstEventTimeout",
        contains=("must not be negative",),
    ),
    *[
        case(
            f"firstEventTimeout: {value!r} is not a Go duration",
            cb({**VLLM, "observation": {"firstEventTimeout": value}}),
            "spec.observation.firstEventTimeout",
            contains=("should match",),
        )
        for value in ("1d", "5 m")
    ],
    case(
        "observation.firstEventTimeout is a duration",
        cb({**VLLM, "observation": {"firstEventTimeout": "five minutes"}}),
        "spec.observation.firstEventTimeout",
    ),
    # --- Breaking API cleanup
    case(
        "removed: spec.integration.engine, integration.firstEventTimeout, backendConfig, resources",
        cb(
            {
                **VLLM,
                "integration": {"engine": "vllm", "firstEventTimeout": "5m"},
                "backendConfig": {"lmcache": {}},
                "resources": {"limits": {"memory": "8Gi"}},
            }
        ),
        "spec.integration.engine",
        "spec.integration.firstEventTimeout",
        "spec.backendConfig",
        "spec.resources",
        contains=("spec.runtime", "spec.observation.firstEventTimeout"),
    ),
    case(
        "removed (carve-out): spec.storage{,.pvc}",
        cb({**MANAGED_LMCACHE, "storage": {"pvc": {"size": "10Gi"}}}),
        "spec.storage",
        contains=("Mooncake",),
    ),
    # --- Cache hierarchy must be internally consistent
    case(
        "hierarchy: a provider block that does not match remoteStorage.provider",
        cb({**VLLM, "remoteStorage": managed("LMCacheServer", redis={"image": "redis:7"})}),
        "spec.remoteStorage.redis",
    ),
    case(
        "hierarchy: a provider block with External ownership",
        cb(
            {
                **VLLM,
                "remoteStorage": external(
                    "LMCacheServer", "lmcache:65432", lmCacheServer={"image": "x"}
                ),
            }
        ),
        "spec.remoteStorage.lmCacheServer",
    ),
    case(
        "hierarchy: remoteStorage names its provider and ownership",
        cb({**VLLM, "remoteStorage": {}}),
        "spec.remoteStorage.provider",
        "spec.remoteStorage.ownership",
    ),
    case(
        "hierarchy: lmCache is used with a non-LMCache type",
        cb({**HICACHE, "lmCache": {"chunkSizeTokens": 256}}),
        "spec.lmCache",
    ),
    case(
        "hierarchy: host-only configuration requests workload autoscaling",
        cb({**VLLM, "autoscaling": {"maxReplicas": 3}}),
        "spec.autoscaling",
    ),
    case(
        "hicache: spec.hiCache on a non-HiCache type",
        cb({**VLLM, "hiCache": {"ratio": "2"}}),
        "spec.hiCache",
    ),
    # --- endpoints
    case(
        "endpoint: required for External",
        cb({**SGLANG, "remoteStorage": {"provider": "Redis", "ownership": "External"}}),
        "spec.remoteStorage.endpoint",
    ),
    case(
        "endpoint: whitespace-only is empty, so still required for External",
        cb({**SGLANG, "remoteStorage": external("Redis", " \t ")}),
        "spec.remoteStorage.endpoint",
    ),
    case(
        "endpoint: rejected for Managed (managed endpoints are controller-observed)",
        cb({**VLLM, "remoteStorage": managed("LMCacheServer", endpoint="lmcache:65432")}),
        "spec.remoteStorage.endpoint",
        contains=("status.endpoint",),
    ),
    case(
        "endpoint: Redis accepts only bare host:port",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis://redis:6379")}),
        "spec.remoteStorage.endpoint",
        contains=('"redis://redis:6379"', "bare host:port"),
    ),
    case(
        "endpoint: a scheme belonging to another provider is rejected (lm:// on Redis)",
        cb({**SGLANG, "remoteStorage": external("Redis", "lm://redis:6379")}),
        "spec.remoteStorage.endpoint",
        contains=("LMCacheServer",),
    ),
    case(
        "endpoint: mooncakestore:// belongs to Mooncake, not LMCacheServer",
        cb({**VLLM, "remoteStorage": external("LMCacheServer", "mooncakestore://m:50051")}),
        "spec.remoteStorage.endpoint",
        contains=("Mooncake",),
    ),
    *[
        case(
            f"endpoint: numeric port in 1-65535 required ({endpoint!r})",
            cb({**VLLM, "remoteStorage": external("LMCacheServer", endpoint)}),
            "spec.remoteStorage.endpoint",
        )
        for endpoint in ("lmcache", "lmcache:", "lmcache:0", "lmcache:65536", "lmcache:http")
    ],
    case(
        "endpoint: URL path/query/fragment components are rejected",
        cb({**VLLM, "remoteStorage": external("LMCacheServer", "lm://lmcache:65432/db?x=1")}),
        "spec.remoteStorage.endpoint",
    ),
    case(
        "endpoint: embedded whitespace is rejected",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis :6379")}),
        "spec.remoteStorage.endpoint",
    ),
    case(
        "endpoint: IPv6 must be bracketed",
        cb({**SGLANG, "remoteStorage": external("Redis", "fd00::12:6379")}),
        "spec.remoteStorage.endpoint",
    ),
    case(
        "cross-namespace: a Service in another namespace needs allowCrossNamespace",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.team-b.svc.cluster.local:6379")}),
        "spec.remoteStorage.endpoint",
        contains=("team-b", "allowCrossNamespace"),
    ),
    case(
        "cross-namespace: a two-label name is a Service of that namespace",
        cb({**SGLANG, "remoteStorage": external("Redis", "rowner-redis.ml:6379")}),
        "spec.remoteStorage.endpoint",
        contains=("ml", "allowCrossNamespace"),
    ),
    case(
        "cross-namespace: judged against the request namespace, not metadata",
        cb({**SGLANG, "remoteStorage": external("Redis", "redis.team-a.svc:6379")}),
        "spec.remoteStorage.endpoint",
        namespace="team-c",
    ),
    # --- engine wire must accept the provider binding
    case(
        "binding: the vLLM wire does not dial Redis (resp)",
        cb({**VLLM, "remoteStorage": managed("Redis")}),
        "spec.remoteStorage.provider",
        contains=("resp",),
    ),
    case(
        "binding: SGLang accepts no binding or RESP only (LMCacheServer rejected)",
        cb({**SGLANG, "remoteStorage": external("LMCacheServer", "lm://l:65432")}),
        "spec.remoteStorage.provider",
    ),
    case(
        "binding: native SGLang HiCache accepts only the nil host-only binding",
        cb({**HICACHE, "remoteStorage": managed("Redis")}),
        "spec.remoteStorage",
    ),
    # --- provider resources
    case(
        "resources: overcommittable limits must be >= requests (memory)",
        cb(resources("Redis", {"requests": {"memory": "16Gi"}, "limits": {"memory": "8Gi"}})),
        res_path("Redis", "limits[memory]"),
        contains=("16Gi", "8Gi"),
    ),
    case(
        "resources: non-overcommittable limits must EQUAL requests",
        cb(
            resources(
                "LMCacheServer",
                {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            )
        ),
        res_path("LMCacheServer", "limits[nvidia.com/gpu]"),
    ),
    case(
        "resources: requests-only rejected for non-overcommittable resources",
        cb(resources("Mooncake", {"requests": {"hugepages-2Mi": "4Mi"}})),
        res_path("Mooncake", "requests[hugepages-2Mi]"),
    ),
    case(
        "resources: claims rejected until DRA is wired end-to-end",
        cb(resources("Redis", {"claims": [{"name": "gpu"}]})),
        res_path("Redis", "claims"),
    ),
    case(
        "resources: extended-resource quantities must be integers",
        cb(resources("Redis", {"limits": {"nvidia.com/gpu": "500m"}})),
        res_path("Redis", "limits[nvidia.com/gpu]"),
    ),
    case(
        "resources: hugepage quantities must align to the page size",
        cb(resources("Redis", {"limits": {"hugepages-2Mi": "3Mi"}})),
        res_path("Redis", "limits[hugepages-2Mi]"),
        contains=("2Mi",),
    ),
    case(
        "resources: quantities must be non-negative",
        cb(resources("LMCacheServer", {"requests": {"memory": "-1Gi"}})),
        res_path("LMCacheServer", "requests[memory]"),
    ),
    case(
        "resources: names must match K8s container-resource rules (each key named)",
        cb(
            resources(
                "Redis",
                {
                    "limits": {
                        "foo": "1",
                        "hugepages-": "2Mi",
                        "hugepages-nope": "2Mi",
                        "kubernetes.io/foo": "1",
                        "requests.kubernetes.io/foo": "1",
                    }
                },
            )
        ),
        res_path("Redis", "limits[foo]"),
        res_path("Redis", "limits[hugepages-]"),
        res_path("Redis", "limits[hugepages-nope]"),
        res_path("Redis", "limits[kubernetes.io/foo]"),
        res_path("Redis", "limits[requests.kubernetes.io/foo]"),
    ),
    case(
        "resources: a malformed quantity is one error at the map key",
        cb(resources("Redis", {"limits": {"memory": "8 GB"}})),
        res_path("Redis", "limits[memory]"),
    ),
    case(
        "resources: a quantity of the wrong JSON type is one error at the map key",
        cb(resources("Redis", {"limits": {"memory": 1.5, "cpu": True}})),
        res_path("Redis", "limits[memory]"),
        res_path("Redis", "limits[cpu]"),
        contains=("must be of type integer or string",),
    ),
    # --- replicas and autoscaling
    case(
        "replicas=0 + autoscaling requires explicit minReplicas",
        cb({**MANAGED_LMCACHE, "replicas": 0, "autoscaling": {"maxReplicas": 3}}),
        "spec.autoscaling.minReplicas",
        contains=("minReplicas",),
    ),
    case(
        "autoscaling: cross-field minReplicas <= maxReplicas",
        cb({**MANAGED_LMCACHE, "autoscaling": {"minReplicas": 4, "maxReplicas": 2}}),
        "spec.autoscaling.minReplicas",
    ),
    case(
        "autoscaling: the CREATE default minReplicas = replicas counts (3 > max 2)",
        cb({**MANAGED_LMCACHE, "replicas": 3, "autoscaling": {"maxReplicas": 2}}),
        "spec.autoscaling.minReplicas",
        contains=("Invalid value: 3",),
        create_only=True,
    ),
    case(
        "autoscaling: minReplicas Minimum 1",
        cb({**MANAGED_LMCACHE, "autoscaling": {"minReplicas": 0, "maxReplicas": 2}}),
        "spec.autoscaling.minReplicas",
    ),
    # --- engine overrides: reserved declarations and admission hard-reject
    case(
        "overrides: vLLM ReservedArgs --kv-transfer-config (override and suppress)",
        cb(
            {
                **VLLM,
                "integration": {
                    "engineOverrides": {
                        "args": ["--max-model-len=8192", "--kv-transfer-config={}"],
                        "suppressArgs": ["--kv-transfer-config"],
                    }
                },
            }
        ),
        "spec.integration.engineOverrides.args[1]",
        "spec.integration.engineOverrides.suppressArgs[0]",
        contains=("--kv-transfer-config", "vLLM+LMCache"),
    ),
    case(
        "overrides: vLLM ReservedEnv (override and suppress, each named)",
        cb(
            {
                **VLLM,
                "integration": {
                    "engineOverrides": {
                        "env": [
                            {"name": "VLLM_USE_V1", "value": "0"},
                            {"name": "LMCACHE_REMOTE_URL", "value": "lm://x:1"},
                        ],
                        "suppressEnv": ["INFERENCECACHE_FAIL_OPEN", "PYTHONHASHSEED"],
                    }
                },
            }
        ),
        "spec.integration.engineOverrides.env[0].name",
        "spec.integration.engineOverrides.env[1].name",
        "spec.integration.engineOverrides.suppressEnv[0]",
        "spec.integration.engineOverrides.suppressEnv[1]",
        contains=(
            "VLLM_USE_V1",
            "LMCACHE_REMOTE_URL",
            "INFERENCECACHE_FAIL_OPEN",
            "PYTHONHASHSEED",
        ),
    ),
    case(
        "overrides: the same reserved set applies with a Mooncake binding",
        cb(
            {
                **MOONCAKE,
                "integration": {
                    **HOST_NETWORK,
                    "engineOverrides": {"args": ["--kv-transfer-config", "{}"]},
                },
            }
        ),
        "spec.integration.engineOverrides.args[0]",
    ),
    case(
        "overrides: SGLang+LMCache reserves --enable-lmcache, --lmcache-config-file and env",
        cb(
            {
                **SGLANG,
                "integration": {
                    "engineOverrides": {
                        "args": ["--enable-lmcache"],
                        "suppressArgs": ["--lmcache-config-file"],
                        "env": [{"name": "LMCACHE_USE_EXPERIMENTAL", "value": "False"}],
                        "suppressEnv": ["INFERENCECACHE_FAIL_OPEN"],
                    }
                },
            }
        ),
        "spec.integration.engineOverrides.args[0]",
        "spec.integration.engineOverrides.suppressArgs[0]",
        "spec.integration.engineOverrides.env[0].name",
        "spec.integration.engineOverrides.suppressEnv[0]",
        contains=("--enable-lmcache", "--lmcache-config-file", "SGLang+LMCache"),
    ),
    # --- events-only
    case(
        "events-only requires spec.type=LMCache",
        cb({**HICACHE, "integration": {"mode": "EventsOnly"}}),
        "spec.type",
        contains=("LMCache", "EventsOnly"),
    ),
    case(
        "events-only: spec.remoteStorage is forbidden (Managed)",
        cb({**EVENTS_ONLY, "remoteStorage": managed("LMCacheServer")}),
        "spec.remoteStorage",
    ),
    case(
        "events-only: spec.remoteStorage is forbidden (External)",
        cb({**EVENTS_ONLY, "remoteStorage": external("LMCacheServer", "lmcache:65432")}),
        "spec.remoteStorage",
    ),
    case(
        "events-only forbids spec.autoscaling (field-scoped to spec.autoscaling)",
        cb({**EVENTS_ONLY, "autoscaling": {"maxReplicas": 3}}),
        "spec.autoscaling",
        contains=("nothing to autoscale",),
    ),
    # --- SGLang role
    *[
        case(
            f"rejectUnsupportedSGLangRole: (SGLang, LMCache) rejects {role}",
            cb({**MANAGED_REDIS, "integration": {"role": role}}),
            "spec.integration.role",
            contains=(role, "ReadWrite"),
        )
        for role in ("ReadOnly", "WriteOnly")
    ],
    # --- Mooncake
    case(
        "mooncake: the master is a singleton (spec.replicas > 1)",
        cb({**MOONCAKE, "replicas": 2}),
        "spec.replicas",
        contains=("singleton",),
    ),
    case(
        "mooncake: spec.autoscaling is rejected when provider is Mooncake",
        cb({**MOONCAKE, "autoscaling": {"minReplicas": 1, "maxReplicas": 2}}),
        "spec.autoscaling",
        contains=("Mooncake",),
    ),
    case(
        "mooncake: the singleton rule applies to any Mooncake provider",
        cb(
            {
                **VLLM,
                "remoteStorage": external("Mooncake", "mooncakestore://m:50051"),
                "integration": HOST_NETWORK,
                "replicas": 3,
            }
        ),
        "spec.replicas",
    ),
    case(
        "engineHostNetwork is rejected on backends that do not need it",
        cb({**MANAGED_LMCACHE, "integration": HOST_NETWORK}),
        "spec.integration.engineHostNetwork",
    ),
    case(
        "engineHostNetwork is rejected on a host-only backend",
        cb({**VLLM, "integration": HOST_NETWORK}),
        "spec.integration.engineHostNetwork",
    ),
    # --- Managed Redis is one non-clustered instance (docs/decisions.md)
    case(
        "reject_managed_redis_multiple_replicas: SGLang + managed Redis with replicas 2",
        cb({**MANAGED_REDIS, "replicas": 2}),
        "spec.replicas",
        contains=("non-clustered", "partial cache"),
    ),
    case(
        "reject_managed_redis_autoscaling: SGLang + managed Redis with autoscaling",
        cb({**MANAGED_REDIS, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}),
        "spec.autoscaling",
        contains=("non-clustered",),
    ),
    case(
        "reject_managed_redis_*: replicas 3 and autoscaling, one error each",
        cb({**MANAGED_REDIS, "replicas": 3, "autoscaling": {"maxReplicas": 4}}),
        "spec.replicas",
        "spec.autoscaling",
    ),
    # --- HiCache supports only the defaults it can honour (docs/decisions.md)
    *[
        case(
            f"reject_unsupported_hicache_role: HiCache rejects {role}",
            cb({**HICACHE, "integration": {"role": role}}),
            "spec.integration.role",
            contains=(role, "ReadWrite"),
        )
        for role in ("ReadOnly", "WriteOnly")
    ],
    case(
        "reject_hicache_fail_closed: HiCache rejects failOpen false, naming true",
        cb({**HICACHE, "integration": {"failOpen": False}}),
        "spec.integration.failOpen",
        contains=("failOpen: true",),
    ),
    case(
        "reject_hicache_without_engine_selector: no engineSelector",
        cb({k: v for k, v in HICACHE.items() if k != "engineSelector"}),
        "spec.engineSelector.matchLabels",
    ),
    case(
        "reject_hicache_without_engine_selector: empty matchLabels",
        cb({**HICACHE, "engineSelector": {"matchLabels": {}}}),
        "spec.engineSelector.matchLabels",
    ),
    # --- HiCache
    case(
        "hicache: spec.hiCache is required for type SGLangHiCache",
        cb({**SGLANG, "type": "SGLangHiCache", "engineSelector": HICACHE["engineSelector"]}),
        "spec.hiCache",
    ),
    case(
        "hicache: exactly one of ratio / sizeGB (both)",
        cb({**HICACHE, "hiCache": {"ratio": "2", "sizeGB": 8}}),
        "spec.hiCache.sizeGB",
    ),
    case(
        "hicache: exactly one of ratio / sizeGB (neither)",
        cb({**HICACHE, "hiCache": {"writePolicy": "write_back"}}),
        "spec.hiCache",
    ),
    *[
        case(
            f"hicache: ratio is a finite number greater than zero ({ratio!r})",
            cb({**HICACHE, "hiCache": {"ratio": ratio}}),
            "spec.hiCache.ratio",
        )
        for ratio in ("0", "-1", "inf", "NaN", "two", "")
    ],
    case(
        "hicache: ratio is a string",
        cb({**HICACHE, "hiCache": {"ratio": 2.0}}),
        "spec.hiCache.ratio",
    ),
    case(
        "hicache: sizeGB is a positive integer",
        cb({**HICACHE, "hiCache": {"sizeGB": 0}}),
        "spec.hiCache.sizeGB",
    ),
    case(
        "hicache: writePolicy / ioBackend / memoryLayout take the SGLang CLI values",
        cb(
            {
                **HICACHE,
                "hiCache": {
                    "ratio": "2",
                    "writePolicy": "write_around",
                    "ioBackend": "mmap",
                    "memoryLayout": "page_last",
                },
            }
        ),
        "spec.hiCache.writePolicy",
        "spec.hiCache.ioBackend",
        "spec.hiCache.memoryLayout",
    ),
    case(
        "hicache: attaching any remoteStorage plus autoscaling",
        cb({**HICACHE, "autoscaling": {"maxReplicas": 2}}),
        "spec.autoscaling",
    ),
    # --- LMCache bounds
    case(
        "lmCache bounds: chunkSizeTokens >= 1, capacity positive, workerPort 1-65535",
        cb(
            {
                **SGLANG,
                "lmCache": {
                    "chunkSizeTokens": 0,
                    "hostMemory": {"capacity": "0"},
                    "workerPort": 70000,
                },
            }
        ),
        "spec.lmCache.chunkSizeTokens",
        "spec.lmCache.workerPort",
        "spec.lmCache.hostMemory.capacity",
    ),
    # --- one violation each, even next to a schema error in the same block
    case(
        "schema error inside a block does not hide the block's own rule (autoscaling {})",
        cb({**EVENTS_ONLY, "autoscaling": {}}),
        "spec.autoscaling.maxReplicas",
        "spec.autoscaling",
    ),
    case(
        "schema error inside a block does not hide the block's own rule (minReplicas 0)",
        cb({**VLLM, "autoscaling": {"minReplicas": 0, "maxReplicas": 2}}),
        "spec.autoscaling.minReplicas",
        "spec.autoscaling",
    ),
    case(
        "schema error inside lmCache does not hide lmCache on a non-LMCache type",
        cb({**HICACHE, "lmCache": {"chunkSizeTokens": 0}}),
        "spec.lmCache.chunkSizeTokens",
        "spec.lmCache",
    ),
    case(
        "a malformed env entry does not hide a reserved arg",
        cb(
            {
                **VLLM,
                "integration": {
                    "engineOverrides": {
                        "env": [{"value": "x"}],
                        "args": ["--kv-transfer-config={}"],
                    }
                },
            }
        ),
        "spec.integration.engineOverrides.env[0].name",
        "spec.integration.engineOverrides.args[0]",
    ),
    case(
        "a bad provider image does not hide a bad provider resource",
        cb(
            {
                **SGLANG,
                "remoteStorage": managed(
                    "Redis", redis={"image": 7, "resources": {"limits": {"memory": "-8Gi"}}}
                ),
            }
        ),
        "spec.remoteStorage.redis.image",
        res_path("Redis", "limits[memory]"),
    ),
    case(
        "a rejected limit is not also judged against its request",
        cb(resources("Redis", {"requests": {"memory": "16Gi"}, "limits": {"memory": "-8Gi"}})),
        res_path("Redis", "limits[memory]"),
    ),
    case(
        "map keys are rendered [key] in schema errors too (matchLabels, nodeSelector)",
        cb(
            {
                **MANAGED_REDIS,
                "engineSelector": {"matchLabels": {"app.kubernetes.io/name": False}},
                "template": {"nodeSelector": {"pool": 3}},
            }
        ),
        "spec.engineSelector.matchLabels[app.kubernetes.io/name]",
        "spec.template.nodeSelector[pool]",
    ),
    # --- annotation
    case(
        "kernel-check annotation: an unrecognized value (strcit) is rejected",
        cb(VLLM, annotations={KERNEL_CHECK: "strcit"}),
        "metadata.annotations[inferencecache.io/lmcache-kernel-check]",
        contains=('"strcit"', "strict"),
    ),
    # --- aggregation
    case(
        "aggregation: several violations in one Invalid status",
        cb(
            {
                "runtime": "SGLang",
                "integration": {
                    "role": "ReadOnly",
                    "engineOverrides": {"env": [{"name": "INFERENCECACHE_FAIL_OPEN"}]},
                },
                "remoteStorage": external("Redis", "redis://r:6379"),
                "autoscaling": {"maxReplicas": 2},
                "backendConfig": {},
            },
            annotations={KERNEL_CHECK: "Strict"},
        ),
        "spec.backendConfig",
        "metadata.annotations[inferencecache.io/lmcache-kernel-check]",
        "spec.autoscaling",
        "spec.remoteStorage.endpoint",
        "spec.integration.engineOverrides.env[0].name",
        "spec.integration.role",
    ),
    # --- warnings ride along
    case(
        "mooncake warning also on a denied Mooncake apply",
        cb({**VLLM, "remoteStorage": managed("Mooncake"), "replicas": 2}),
        "spec.replicas",
        warns=(MOONCAKE_WARNING,),
    ),
]

WARNING_CASES = [
    case(
        "mooncake: admission warns on every Mooncake remoteStorage apply (Managed)",
        cb({**VLLM, "remoteStorage": managed("Mooncake")}),
        warns=(MOONCAKE_WARNING, "zero KV"),
    ),
    case(
        "mooncake: ... and with External ownership",
        cb({**VLLM, "remoteStorage": external("Mooncake", "mooncakestore://10.0.0.7:50051")}),
        warns=(MOONCAKE_WARNING,),
    ),
    case(
        "mooncake: engineHostNetwork false still warns",
        cb(
            {
                **VLLM,
                "remoteStorage": managed("Mooncake"),
                "integration": {"engineHostNetwork": False},
            }
        ),
        warns=(MOONCAKE_WARNING,),
    ),
    case(
        "mooncake: warns on UPDATE too",
        cb({**VLLM, "remoteStorage": managed("Mooncake")}, labels={"v": "2"}),
        warns=(MOONCAKE_WARNING,),
        operation="UPDATE",
        old=cb({**VLLM, "remoteStorage": managed("Mooncake")}),
    ),
]


def _judge(client: TestClient, c: Case) -> dict[str, Any]:
    return post(client, PATH_VALIDATE_CB, review(c.operation, c.obj, c.old, c.namespace))


def _check_validation(resp: dict[str, Any], c: Case) -> None:
    if not c.fields:
        assert resp["allowed"] is True, resp
        assert "status" not in resp or resp["status"].get("code", 200) == 200
    else:
        assert resp["allowed"] is False, resp
        status = resp["status"]
        assert status["kind"] == "Status"
        assert status["apiVersion"] == "v1"
        assert status["status"] == "Failure"
        assert status["code"] == 422
        assert status["reason"] == "Invalid"
        assert status["details"]["kind"] == "CacheBackend"
        assert status["details"]["group"] == "inferencecache.io"
        assert status["details"]["name"] == "cache"
        got = fields(resp)
        assert sorted(got) == sorted(c.fields), got
        assert len(got) == len(set(got)), f"duplicate causes: {got}"
        message = status["message"]
        assert message.startswith('CacheBackend.inferencecache.io "cache" is invalid: ')
        for cause in status["details"]["causes"]:
            assert f"{cause['field']}: {cause['message']}" in message
            assert cause["reason"].startswith("FieldValue")
        if len(got) > 1:
            assert message.endswith("]"), "several errors are printed in brackets"
        for text in c.contains:
            assert text in message, (text, message)
    if c.warns:
        assert len(resp.get("warnings", [])) == 1, resp
        for text in c.warns:
            assert text in resp["warnings"][0]
    else:
        assert not resp.get("warnings"), resp


@pytest.mark.parametrize("c", VALID_CASES + INVALID_CASES + WARNING_CASES)
def test_validate(client: TestClient, c: Case) -> None:
    _check_validation(_judge(client, c), c)


@pytest.mark.parametrize("c", VALID_CASES + INVALID_CASES + WARNING_CASES)
def test_mutate_never_denies_and_its_patch_applies_and_is_idempotent(
    client: TestClient, c: Case
) -> None:
    """Spec "Defaulting (mutating)": the defaulter answers every object with a patch that
    applies; re-admitting the patched object changes nothing (operator values are never
    clobbered)."""
    resp = post(client, PATH_MUTATE_CB, review(c.operation, c.obj, c.old, c.namespace))
    assert resp["allowed"] is True
    ops = patch_of(resp)
    if not ops:
        return
    patched = jsonpatch.apply_patch(c.obj, ops)
    _assert_minimal(c.obj, ops)
    again = post(client, PATH_MUTATE_CB, review(c.operation, patched, c.old, c.namespace))
    assert patch_of(again) == []


@pytest.mark.parametrize("c", VALID_CASES + INVALID_CASES)
def test_dry_run_changes_nothing(client: TestClient, c: Case) -> None:
    """dryRun: true is judged and defaulted exactly like a real write."""
    for path in (PATH_VALIDATE_CB, PATH_MUTATE_CB):
        real = post(client, path, review(c.operation, c.obj, c.old, c.namespace))
        dry = post(client, path, review(c.operation, c.obj, c.old, c.namespace, dryRun=True))
        assert dry == real


@pytest.mark.parametrize("c", INVALID_CASES)
def test_update_without_old_object_is_judged_like_create(client: TestClient, c: Case) -> None:
    """An UPDATE whose oldObject is missing has nothing to filter against: every
    violation is reported (except the CREATE-only minReplicas default)."""
    if c.create_only:
        return
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", c.obj, None, c.namespace))
    assert resp["allowed"] is False
    assert sorted(fields(resp)) == sorted(c.fields)


@pytest.mark.parametrize("c", INVALID_CASES)
def test_update_that_does_not_touch_a_pre_existing_violation_is_allowed(
    client: TestClient, c: Case
) -> None:
    """Spec: ValidateUpdate only rejects violations the update introduces — a label edit
    on an object already stored with these violations is not blocked."""
    if not isinstance(c.obj, dict) or not isinstance(c.obj.get("metadata"), dict):
        return
    new = copy.deepcopy(c.obj)
    new["metadata"].setdefault("labels", {})["edited"] = "true"
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", new, c.obj, c.namespace))
    assert resp["allowed"] is True, resp


# ================================================================ UPDATE semantics


def test_update_flipping_a_valid_field_invalid_is_rejected_with_only_the_new_error(
    client: TestClient,
) -> None:
    """Spec: a kubectl edit that flips a previously-valid field into an invalid one is
    still rejected, because the violation is then new to the diff."""
    old = cb({**MANAGED_REDIS, "integration": {"role": "WriteOnly"}})
    new = cb({**MANAGED_REDIS, "integration": {"role": "WriteOnly"}, "replicas": -2})
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", new, old))
    assert resp["allowed"] is False
    assert fields(resp) == ["spec.replicas"]


def test_update_changing_one_bad_endpoint_to_another_is_a_fresh_violation(
    client: TestClient,
) -> None:
    """Spec: errors are compared by (Type, Field, BadValue, Detail)."""
    old = cb({**SGLANG, "remoteStorage": external("Redis", "lm://redis:6379")})
    new = cb({**SGLANG, "remoteStorage": external("Redis", "redis://redis:6379")})
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", new, old))
    assert resp["allowed"] is False
    assert fields(resp) == ["spec.remoteStorage.endpoint"]
    assert '"redis://redis:6379"' in resp["status"]["message"]


# Errors point at the field the operator must change, and the field does
# not depend on which field an edit touched, so the UPDATE filter recognises a
# pre-existing violation whatever else the edit changes.
PAIR_VIOLATION = {**HICACHE, "runtime": "VLLM"}  # no adapter for VLLM/SGLangHiCache
EVENTS_ONLY_TYPE_VIOLATION = {**HICACHE, "integration": {"mode": "EventsOnly"}}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # The operator edited spec.runtime: the error still names spec.type.
        (cb({**HICACHE, "runtime": "SGLang"}), cb(PAIR_VIOLATION)),
        # The operator edited spec.type.
        (
            cb({**VLLM, "lmCache": {}}),
            cb(
                {
                    **VLLM,
                    "type": "SGLangHiCache",
                    "hiCache": {"ratio": "2"},
                    "engineSelector": HICACHE["engineSelector"],
                }
            ),
        ),
    ],
    ids=["runtime-edited", "type-edited"],
)
def test_unsupported_runtime_cache_pair_is_reported_at_spec_type(
    client: TestClient, old: dict[str, Any], new: dict[str, Any]
) -> None:
    """The pair error names spec.type, the engine-cache implementation the CacheBackend
    chooses; spec.runtime is the engine the operator already runs (docs/decisions.md).
    The field is fixed per rule, never chosen by which field the diff
    touched."""
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", new, old))
    assert resp["allowed"] is False
    assert fields(resp) == ["spec.type"]


@pytest.mark.parametrize("violation", [PAIR_VIOLATION, EVENTS_ONLY_TYPE_VIOLATION])
@pytest.mark.parametrize(
    "edit",
    [
        {"replicas": 0},
        {"observation": {"modelID": "Qwen/Qwen3-8B", "firstEventTimeout": "10m"}},
        {"engineSelector": {"matchLabels": {"app": "other"}}},
        {"hiCache": {"sizeGB": 32}},
    ],
    ids=["replicas", "observation", "selector", "hiCache"],
)
def test_unrelated_edit_keeps_a_pre_existing_spec_type_violation_allowed(
    client: TestClient, violation: dict[str, Any], edit: dict[str, Any]
) -> None:
    """The pre-existing (runtime, type) or EventsOnly-type violation is
    re-reported with the same (type, field, badValue, detail) after an edit of other
    fields, so the UPDATE filter drops it and the edit goes through."""
    old = cb(violation)
    new = cb({**violation, **edit})
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", new, old))
    assert resp["allowed"] is True, resp
    # ...while the same object is still rejected on CREATE, at spec.type.
    created = post(client, PATH_VALIDATE_CB, review("CREATE", new))
    assert "spec.type" in fields(created)


def test_pre_existing_managed_redis_replicas_allow_unrelated_edits_not_more_replicas(
    client: TestClient,
) -> None:
    """One managed Redis instance, through the UPDATE filter: a managed Redis stored with
    replicas 3 (admitted before the rule) can still be edited; raising replicas to 4 is a
    fresh violation."""
    old = cb({**MANAGED_REDIS, "replicas": 3})
    edited = cb({**MANAGED_REDIS, "replicas": 3, "observation": {"modelID": "m"}})
    assert post(client, PATH_VALIDATE_CB, review("UPDATE", edited, old))["allowed"] is True
    more = cb({**MANAGED_REDIS, "replicas": 4})
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", more, old))
    assert fields(resp) == ["spec.replicas"]
    fixed = cb({**MANAGED_REDIS, "replicas": 1})
    assert post(client, PATH_VALIDATE_CB, review("UPDATE", fixed, old))["allowed"] is True


def test_update_removing_engine_host_network_need_is_new(client: TestClient) -> None:
    """A Mooncake backend retyped to host-only while keeping engineHostNetwork introduces
    the inert-flag violation; dropping the flag with it is accepted."""
    old = cb(MOONCAKE)
    keeps = cb({**VLLM, "integration": HOST_NETWORK})
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", keeps, old))
    assert fields(resp) == ["spec.integration.engineHostNetwork"]
    drops = cb(VLLM)
    assert post(client, PATH_VALIDATE_CB, review("UPDATE", drops, old))["allowed"] is True


def test_update_judges_min_replicas_as_written(client: TestClient) -> None:
    """First-apply-only: an UPDATE is judged without the CREATE minReplicas default."""
    spec = {**MANAGED_LMCACHE, "replicas": 3, "autoscaling": {"maxReplicas": 2}}
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", cb(spec), cb(spec)))
    assert resp["allowed"] is True
    resp = post(client, PATH_VALIDATE_CB, review("UPDATE", cb(spec), None))
    assert resp["allowed"] is True


@pytest.mark.parametrize("path", [PATH_VALIDATE_CB, PATH_MUTATE_CB])
def test_delete_is_always_allowed(client: TestClient, path: str) -> None:
    """Spec: the webhooks judge CREATE and UPDATE; removing a CacheBackend admitted under
    a laxer rule must still succeed (object null, oldObject set)."""
    old = cb({"runtime": "vllm", "type": "Mooncake", "replicas": -1})
    resp = post(client, path, review("DELETE", None, old))
    assert resp == {"uid": UID, "allowed": True}


def test_status_subresource_update_is_not_judged(client: TestClient) -> None:
    """A status write cannot change the spec (the API server keeps the old one), so the
    spec is not judged: not even a violation the spec would introduce next to oldObject."""
    obj = cb({**SGLANG, "integration": {"role": "ReadOnly"}})
    valid_old = cb(SGLANG)
    for old in (obj, valid_old, None):
        resp = post(client, PATH_VALIDATE_CB, review("UPDATE", obj, old, subResource="status"))
        assert resp["allowed"] is True
        assert "status" not in resp


def test_request_without_namespace_and_without_metadata_namespace(client: TestClient) -> None:
    """Namespace falls back to "default": a Service there is not a crossing."""
    obj = cb({**SGLANG, "remoteStorage": external("Redis", "redis.default.svc:6379")})
    del obj["metadata"]["namespace"]
    assert post(client, PATH_VALIDATE_CB, review("CREATE", obj, namespace=None))["allowed"]


def test_generate_name_object_is_named_from_the_request(client: TestClient) -> None:
    obj = cb({**SGLANG, "integration": {"role": "ReadOnly"}})
    obj["metadata"] = {"generateName": "cache-"}
    resp = post(client, PATH_VALIDATE_CB, review("CREATE", obj))
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith('CacheBackend.inferencecache.io "cache" is')


# ====================================================================== samples


@pytest.mark.parametrize(("name", "doc"), sample_backends())
def test_every_sample_is_allowed_without_warnings_and_mutates_idempotently(
    client: TestClient, name: str, doc: dict[str, Any]
) -> None:
    """Spec: "Default samples ... exercise the no-override path"; every sample is valid.
    The samples' Mooncake backends set engineHostNetwork, so no sample warns."""
    resp = post(client, PATH_VALIDATE_CB, review("CREATE", doc))
    assert resp["allowed"] is True, resp
    assert not resp.get("warnings")
    mutated = post(client, PATH_MUTATE_CB, review("CREATE", doc))
    patched = jsonpatch.apply_patch(doc, patch_of(mutated))
    assert post(client, PATH_VALIDATE_CB, review("CREATE", patched))["allowed"] is True
    assert patch_of(post(client, PATH_MUTATE_CB, review("CREATE", patched))) == []
    assert patch_of(post(client, PATH_MUTATE_CB, review("UPDATE", patched, patched))) == []


# ============================================================ mutating: the table


def _assert_minimal(before: Any, ops: list[dict[str, Any]]) -> None:
    """No op re-states a value that is already there; only add/replace."""
    for op in ops:
        assert op["op"] in ("add", "replace"), op
        pointer = jsonpatch.JsonPointer(op["path"])
        try:
            current = pointer.resolve(before)
        except jsonpatch.JsonPointerException:
            assert op["op"] == "add", op
            continue
        assert current != op["value"], f"no-op patch entry {op}"


@dataclass
class MutateCase:
    obj: Any
    expected: Any  # the object after the patch
    paths: list[str]  # the exact set of patched paths
    operation: str = "CREATE"
    old: Any = None


def mcase(case_id: str, obj: Any, expected: Any, *paths: str, **kw: Any) -> Any:
    return pytest.param(MutateCase(obj, expected, list(paths), **kw), id=case_id)


INTEGRATION_DEFAULTS = {"mode": "Offload", "role": "ReadWrite", "failOpen": True}
OBSERVATION_DEFAULTS = {"firstEventTimeout": "5m"}
APPLIED = {
    "integration": dict(INTEGRATION_DEFAULTS),
    "observation": dict(OBSERVATION_DEFAULTS),
}

MUTATE_CASES = [
    mcase(
        "contract: spec.integration is materialised; observation gets firstEventTimeout 5m",
        cb(VLLM),
        cb({**VLLM, **APPLIED}),
        "/spec/integration",
        "/spec/observation",
    ),
    mcase(
        "contract: the same on UPDATE (materialising is not first-apply-only)",
        cb(VLLM),
        cb({**VLLM, **APPLIED}),
        "/spec/integration",
        "/spec/observation",
        operation="UPDATE",
        old=cb(VLLM),
    ),
    mcase(
        "defaulting: minReplicas = spec.replicas on first apply",
        cb({**MANAGED_LMCACHE, "replicas": 2, "autoscaling": {"maxReplicas": 6}}),
        cb(
            {
                **MANAGED_LMCACHE,
                **APPLIED,
                "replicas": 2,
                "autoscaling": {"maxReplicas": 6, "minReplicas": 2},
            }
        ),
        "/spec/integration",
        "/spec/observation",
        "/spec/autoscaling/minReplicas",
    ),
    mcase(
        "defaulting: minReplicas = the post-marker replicas default 1",
        cb({**MANAGED_LMCACHE, **APPLIED, "autoscaling": {"maxReplicas": 6}}),
        cb({**MANAGED_LMCACHE, **APPLIED, "autoscaling": {"maxReplicas": 6, "minReplicas": 1}}),
        "/spec/autoscaling/minReplicas",
    ),
    mcase(
        "defaulting: skipped when spec.replicas is 0 (schema Minimum=1)",
        cb({**MANAGED_LMCACHE, **APPLIED, "replicas": 0, "autoscaling": {"maxReplicas": 6}}),
        cb({**MANAGED_LMCACHE, **APPLIED, "replicas": 0, "autoscaling": {"maxReplicas": 6}}),
    ),
    mcase(
        "defaulting: the defaulter refuses to overwrite a non-nil minReplicas",
        cb(
            {
                **MANAGED_LMCACHE,
                **APPLIED,
                "replicas": 4,
                "autoscaling": {"minReplicas": 2, "maxReplicas": 6},
            }
        ),
        cb(
            {
                **MANAGED_LMCACHE,
                **APPLIED,
                "replicas": 4,
                "autoscaling": {"minReplicas": 2, "maxReplicas": 6},
            }
        ),
    ),
    mcase(
        "first-apply-only: an UPDATE editing spec.replicas does not move minReplicas",
        cb({**MANAGED_LMCACHE, **APPLIED, "replicas": 5, "autoscaling": {"maxReplicas": 6}}),
        cb({**MANAGED_LMCACHE, **APPLIED, "replicas": 5, "autoscaling": {"maxReplicas": 6}}),
        operation="UPDATE",
        old=cb(
            {
                **MANAGED_LMCACHE,
                **APPLIED,
                "replicas": 2,
                "autoscaling": {"maxReplicas": 6, "minReplicas": 2},
            }
        ),
    ),
    mcase(
        "first-apply-only: an UPDATE without oldObject does not compute minReplicas",
        cb({**MANAGED_LMCACHE, **APPLIED, "replicas": 2, "autoscaling": {"maxReplicas": 6}}),
        cb({**MANAGED_LMCACHE, **APPLIED, "replicas": 2, "autoscaling": {"maxReplicas": 6}}),
        operation="UPDATE",
    ),
    mcase(
        "operator-set values are never clobbered",
        cb(
            {
                **EVENTS_ONLY,
                "integration": {"mode": "EventsOnly", "role": "ReadOnly", "failOpen": False},
                "observation": {"modelID": "m", "firstEventTimeout": "15m"},
            }
        ),
        cb(
            {
                **EVENTS_ONLY,
                "integration": {"mode": "EventsOnly", "role": "ReadOnly", "failOpen": False},
                "observation": {"modelID": "m", "firstEventTimeout": "15m"},
            }
        ),
    ),
    mcase(
        "nested defaults inside existing blocks: only the missing leaves",
        cb({**VLLM, "integration": {"failOpen": False}, "observation": {"modelID": "m"}}),
        cb(
            {
                **VLLM,
                "integration": {"failOpen": False, "mode": "Offload", "role": "ReadWrite"},
                "observation": {"modelID": "m", "firstEventTimeout": "5m"},
            }
        ),
        "/spec/integration/mode",
        "/spec/integration/role",
        "/spec/observation/firstEventTimeout",
    ),
    mcase(
        "nulls mean unset and are defaulted",
        cb(
            {
                **MANAGED_LMCACHE,
                "integration": None,
                "observation": None,
                "autoscaling": {"maxReplicas": 3, "minReplicas": None},
            }
        ),
        cb(
            {
                **MANAGED_LMCACHE,
                **APPLIED,
                "autoscaling": {"maxReplicas": 3, "minReplicas": 1},
            }
        ),
        "/spec/integration",
        "/spec/observation",
        "/spec/autoscaling/minReplicas",
    ),
    mcase(
        "the webhook does not stamp the API server's literal defaults (type, replicas, ...)",
        cb({**VLLM, **APPLIED}),
        cb({**VLLM, **APPLIED}),
    ),
    mcase(
        "unknown fields are left alone",
        cb({**VLLM, **APPLIED, "futureField": {"a": [1, None]}}),
        cb({**VLLM, **APPLIED, "futureField": {"a": [1, None]}}),
    ),
    mcase("a malformed spec gets no patch (validation reports it)", cb("x"), cb("x")),
    mcase("a missing spec gets no patch", cb(no_spec=True), cb(no_spec=True)),
    mcase(
        "wrong-typed blocks are left for validation",
        cb({**VLLM, "integration": "Offload", "observation": ["5m"]}),
        cb({**VLLM, "integration": "Offload", "observation": ["5m"]}),
    ),
]


@pytest.mark.parametrize("m", MUTATE_CASES)
def test_mutate(client: TestClient, m: MutateCase) -> None:
    for dry_run in (False, True):
        resp = post(client, PATH_MUTATE_CB, review(m.operation, m.obj, m.old, dryRun=dry_run))
        assert resp["allowed"] is True
        assert "status" not in resp
        ops = patch_of(resp)
        assert sorted(op["path"] for op in ops) == sorted(m.paths)
        if not ops:
            assert "patch" not in resp
            assert "patchType" not in resp
        _assert_minimal(m.obj, ops)
        patched = jsonpatch.apply_patch(m.obj, ops)
        assert patched == m.expected
        again = post(client, PATH_MUTATE_CB, review(m.operation, patched, m.old))
        assert patch_of(again) == []


def test_mutated_object_is_judged_like_the_raw_one(client: TestClient) -> None:
    """The validating webhook judges a raw manifest as if the defaulter and the API
    server's markers had run: raw and mutated answers agree."""
    raw = cb({**MANAGED_LMCACHE, "replicas": 3, "autoscaling": {"maxReplicas": 2}})
    patched = jsonpatch.apply_patch(
        raw, patch_of(post(client, PATH_MUTATE_CB, review("CREATE", raw)))
    )
    assert patched["spec"]["autoscaling"]["minReplicas"] == 3
    for obj in (raw, patched):
        resp = post(client, PATH_VALIDATE_CB, review("CREATE", obj))
        assert fields(resp) == ["spec.autoscaling.minReplicas"]


def test_there_are_enough_spec_cases() -> None:
    """The acceptance replay has several dozen payloads; this table is larger."""
    assert len(VALID_CASES) + len(INVALID_CASES) + len(WARNING_CASES) >= 60
    assert len(MUTATE_CASES) >= 12
