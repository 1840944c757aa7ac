"""What the privilege guard's one rule costs an UPDATE (docs/performance.md, "The
privilege guard": "The sample engine pod").

In process, for a few representative CacheBackend UPDATEs by a reviewed writer:

- ``plan``: ``webhook_svc.workload_authz.review_plan`` — both objects defaulted, the
  managed workload rendered twice, the annotation rules, and the fixed sample engine
  pod wired with the old and the new backend and compared — i.e. everything the
  validate route adds before any SubjectAccessReview is asked;
- ``fields only``: the same decision with a field list instead of the sample pod
  (``workload_access`` plus ``engine_shaping_signature``), the guard's shape before
  the sample comparison, for the difference;
- ``validate``: the whole validate handler for the same request (schema, defaults,
  every rule), for scale.

Prints p50/p99 per scenario in microseconds.

    .venv/bin/python benchmarks/bench_engine_access.py [--iterations 3000]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.defaulting import default_cachebackend
from webhook_svc.admission_review import AdmissionRequest, parse_review
from webhook_svc.cachebackend_admission import validate_cachebackend
from webhook_svc.workload_authz import (
    engine_shaping_signature,
    review_plan,
    workload_access,
)

NS = "team-a"
USER = {"username": "alice", "groups": ["system:authenticated"]}
CONSENT = "inferencecache.io/allowed-consumer-namespaces"


def backend(spec: dict[str, Any], **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cache", "namespace": NS, "uid": "u-1"}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": meta,
        "spec": spec,
    }


SELECTOR = {"matchLabels": {"app": "engine"}}
REDIS = backend(
    {
        "runtime": "SGLang",
        "engineSelector": SELECTOR,
        "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
    },
    **{CONSENT: "team-b"},
)
LMCACHE = backend(
    {
        "runtime": "VLLM",
        "engineSelector": SELECTOR,
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
    }
)
EXTERNAL = backend(
    {
        "runtime": "VLLM",
        "engineSelector": SELECTOR,
        "remoteStorage": {
            "provider": "LMCacheServer",
            "ownership": "External",
            "endpoint": "lm://cache.example.com:65432",
        },
    }
)


def labelled(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"] = {"team": "a"}
    return out


def moved(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["remoteStorage"]["endpoint"] = "lm://elsewhere.example.com:65432"
    return out


def widened(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"][CONSENT] = "team-b,team-c"
    return out


SCENARIOS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("label edit, managed Redis (SGLang)", labelled(REDIS), REDIS),
    ("label edit, managed LMCache server (vLLM)", labelled(LMCACHE), LMCACHE),
    ("endpoint moved, External (vLLM)", moved(EXTERNAL), EXTERNAL),
    ("consent widened, managed Redis", widened(REDIS), REDIS),
]


def request(obj: dict[str, Any], old: dict[str, Any]) -> AdmissionRequest:
    return parse_review(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {
                    "group": "inferencecache.io",
                    "version": "v1alpha1",
                    "kind": "CacheBackend",
                },
                "operation": "UPDATE",
                "namespace": NS,
                "name": "cache",
                "userInfo": USER,
                "object": obj,
                "oldObject": old,
            },
        }
    )


def fields_only(req: AdmissionRequest) -> bool:
    assert req.obj is not None
    assert req.old_obj is not None
    obj = default_cachebackend(req.obj, req.operation, req.old_obj)
    old = default_cachebackend(req.old_obj, "UPDATE", None)
    return bool(workload_access("UPDATE", obj, old)) or (
        engine_shaping_signature(obj) != engine_shaping_signature(old)
    )


def measure(call: Callable[[], Any], iterations: int) -> list[float]:
    for _ in range(min(200, iterations)):
        call()
    gc.collect()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def p(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1] if len(samples) > 1 else samples[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3000)
    args = parser.parse_args()
    print(f"{'scenario':44} {'what':12} {'p50 us':>8} {'p99 us':>8}")
    for label, obj, old in SCENARIOS:
        req = request(obj, old)
        plan = review_plan(req)
        needs = ",".join(str(a) for a in plan.needed) if plan else "nothing"
        for what, call in (
            ("plan", lambda r=req: review_plan(r)),
            ("fields only", lambda r=req: fields_only(r)),
            ("validate", lambda r=req: validate_cachebackend(r)),
        ):
            samples = measure(call, args.iterations)
            print(f"{label:44} {what:12} {p(samples, 50):8.0f} {p(samples, 99):8.0f}")
        print(f"{'':44} needs: {needs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
