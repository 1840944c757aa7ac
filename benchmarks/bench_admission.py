"""Throughput and latency of the CacheBackend admission webhooks (mutate and validate).

In process (default): calls mutate_cachebackend / validate_cachebackend on a parsed
AdmissionRequest for a few representative CacheBackends — the whole handler, i.e.
defaulting, JSON patch and base64 for mutate; schema parse, CRD defaults and every
rule, Invalid status and warnings for validate — and prints admissions/s and
p50/p99/max per scenario. The budget is p99 of validate < 2 ms.

Over HTTP (``--http URL``): posts the same AdmissionReviews with httpx over loopback
to a running webhook (``icache webhook --insecure --port 8443 ...``) and reports the
round-trip figures, JSON encoding and the ASGI stack included.

    .venv/bin/python benchmarks/bench_admission.py [--iterations 5000]
    .venv/bin/python benchmarks/bench_admission.py --http http://127.0.0.1:8443 --iterations 2000
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook_svc.admission_review import AdmissionRequest, parse_review
from webhook_svc.cachebackend_admission import (
    mutate_cachebackend,
    validate_cachebackend,
)

NS = "inference"
BUDGET_VALIDATE_P99_MS = 2.0
MUTATE_PATH = "/mutate-inferencecache-io-v1alpha1-cachebackend"
VALIDATE_PATH = "/validate-inferencecache-io-v1alpha1-cachebackend"


def cachebackend(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {"name": name, "namespace": NS, **meta},
        "spec": {"engineSelector": {"matchLabels": {"app": name}}, **spec},
    }


RESOURCES = {
    "requests": {"cpu": "500m", "memory": "8Gi", "nvidia.com/gpu": "1", "hugepages-2Mi": "64Mi"},
    "limits": {"memory": "16Gi", "nvidia.com/gpu": "1", "hugepages-2Mi": "64Mi"},
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "vllm-host-only": cachebackend(
        "vllm-host-only",
        {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "32Gi"}}},
    ),
    "vllm-lmcacheserver-autoscaled": cachebackend(
        "vllm-lmcacheserver",
        {
            "runtime": "VLLM",
            "remoteStorage": {
                "provider": "LMCacheServer",
                "ownership": "Managed",
                "lmCacheServer": {"resources": RESOURCES},
            },
            "replicas": 2,
            "autoscaling": {"maxReplicas": 6, "targetCPUUtilizationPercent": 70},
            "integration": {
                "engineOverrides": {
                    "args": ["--max-model-len=8192"],
                    "env": [{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}],
                    "suppressEnv": ["LMCACHE_REMOTE_SERDE"],
                }
            },
            "observation": {"modelID": "meta-llama/Llama-3.1-8B-Instruct"},
        },
        annotations={"inferencecache.io/lmcache-kernel-check": "strict"},
    ),
    "sglang-redis-external": cachebackend(
        "sglang-redis-external",
        {
            "runtime": "SGLang",
            "remoteStorage": {
                "provider": "Redis",
                "ownership": "External",
                "endpoint": "redis.cache-infra.svc.cluster.local:6379",
            },
            "allowCrossNamespace": True,
        },
    ),
    "sglang-hicache": cachebackend(
        "sglang-hicache",
        {
            "runtime": "SGLang",
            "type": "SGLangHiCache",
            "hiCache": {"ratio": "2.0", "writePolicy": "write_through", "ioBackend": "kernel"},
        },
    ),
    "mooncake-warning": cachebackend(
        "vllm-mooncake",
        {"runtime": "VLLM", "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"}},
    ),
    "invalid-7-errors": cachebackend(
        "broken",
        {
            "runtime": "SGLang",
            "backendConfig": {},
            "integration": {
                "role": "ReadOnly",
                "engineOverrides": {
                    "args": ["--enable-lmcache=false"],
                    "suppressEnv": ["INFERENCECACHE_FAIL_OPEN"],
                },
            },
            "remoteStorage": {
                "provider": "Redis",
                "ownership": "External",
                "endpoint": "redis://redis.cache.svc:6379/0",
            },
            "autoscaling": {"maxReplicas": 3},
        },
        annotations={"inferencecache.io/lmcache-kernel-check": "strcit"},
    ),
    "invalid-schema": cachebackend(
        "old-style",
        {
            "type": "Mooncake",
            "replicas": -1,
            "remoteStorage": {
                "provider": "Mooncake",
                "ownership": "Managed",
                "mooncake": {"resources": {"requests": {"foo": "1", "nvidia.com/gpu": "500m"}}},
            },
        },
    ),
}


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "bench-0000",
        "kind": {"group": "inferencecache.io", "version": "v1alpha1", "kind": "CacheBackend"},
        "name": obj["metadata"]["name"],
        "namespace": NS,
        "operation": operation,
        "object": obj,
    }
    if operation == "UPDATE":
        old = copy.deepcopy(obj)
        old["metadata"]["labels"] = {"rev": "1"}
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def measure(call: Callable[[], Any], iterations: int) -> list[float]:
    for _ in range(min(200, iterations)):
        call()  # warm caches (CRD schema, pydantic validators, regexes)
    samples = []
    gc.collect()
    for _ in range(iterations):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(label: str, samples: list[float]) -> float:
    p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
    rate = len(samples) / sum(samples)
    print(
        f"  {label:42s} {rate:9.0f}/s  p50 {p50 * 1e3:6.3f} ms  p99 {p99 * 1e3:6.3f} ms  "
        f"max {max(samples) * 1e3:6.3f} ms  mean {statistics.fmean(samples) * 1e3:6.3f} ms"
    )
    return p99


def in_process(iterations: int) -> int:
    handlers: dict[str, Callable[[AdmissionRequest], dict[str, Any]]] = {
        "mutate": mutate_cachebackend,
        "validate": validate_cachebackend,
    }
    worst_validate = 0.0
    print(f"in-process, {iterations} admissions per row")
    for operation in ("CREATE", "UPDATE"):
        for name, obj in SCENARIOS.items():
            req = parse_review(review(obj, operation))
            for handler_name, handler in handlers.items():
                p99 = report(
                    f"{handler_name:8s} {operation:6s} {name}",
                    measure(functools.partial(handler, req), iterations),
                )
                if handler_name == "validate":
                    worst_validate = max(worst_validate, p99)
    verdict = "OK" if worst_validate * 1e3 < BUDGET_VALIDATE_P99_MS else "OVER BUDGET"
    print(
        f"worst validate p99 {worst_validate * 1e3:.3f} ms "
        f"(budget {BUDGET_VALIDATE_P99_MS} ms): {verdict}"
    )
    return 0 if verdict == "OK" else 1


def over_http(base_url: str, iterations: int) -> int:
    import httpx

    print(f"HTTP {base_url}, {iterations} admissions per row (loopback round trip)")
    with httpx.Client(base_url=base_url, timeout=10.0) as client:
        for name, obj in SCENARIOS.items():
            body = review(obj)
            for label, path in (("mutate", MUTATE_PATH), ("validate", VALIDATE_PATH)):

                def post(p: str = path, b: dict[str, Any] = body) -> None:
                    reply = client.post(p, json=b)
                    reply.raise_for_status()

                report(f"{label:8s} CREATE {name}", measure(post, iterations))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument(
        "--http",
        metavar="URL",
        help="post to a running webhook (e.g. http://127.0.0.1:8443) instead of in process",
    )
    args = parser.parse_args()
    if args.http:
        return over_http(args.http.rstrip("/"), args.iterations)
    return in_process(args.iterations)


if __name__ == "__main__":
    sys.exit(main())
