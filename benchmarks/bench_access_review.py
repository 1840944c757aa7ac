"""What the CacheBackend privilege guard's SubjectAccessReviews cost, and what the
allowed-answer TTL saves (docs/performance.md, "The privilege guard").

Starts etcd + kube-apiserver (tests/harness), then drives the webhook's own reviewer
(``webhook_svc.workload_authz.ApiAccessReviewer`` on ``kubeio.async_client``) the way
the validating route does for a reviewed writer's managed CREATE: one review for
``create deployments`` and one for ``create pods``, ``--requests`` times, 8 at once,
first with no cache (``--access-review-allowed-ttl=0``) and then with the default TTL.
Prints reviews made, requests per second and the client CPU per request.

    .venv/bin/python benchmarks/bench_access_review.py --requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubeio import access as kubeaccess  # noqa: E402
from kubeio.async_client import ApiServer  # noqa: E402
from tests.harness.controlplane import ControlPlane, wait_until  # noqa: E402
from webhook_svc.webhook_cli import DEFAULT_ACCESS_REVIEW_ALLOWED_TTL  # noqa: E402
from webhook_svc.workload_authz import (  # noqa: E402
    DEPLOYMENTS,
    PODS,
    ApiAccessReviewer,
    ReviewCache,
    access_review,
)

USER = {"username": "alice", "groups": ["system:authenticated"]}
CONCURRENCY = 8


class CountingApi(ApiServer):
    """The webhook's API client, counting the reviews that reach the API server."""

    posts = 0

    async def post(self, path: str, body: dict[str, Any], budget: float) -> tuple[int, bytes]:
        CountingApi.posts += 1
        return await super().post(path, body, budget)


async def drive(reviewer: ApiAccessReviewer, requests: int) -> float:
    bodies = [access_review(USER, "bench", access) for access in (DEPLOYMENTS, PODS)]
    queue = list(range(requests))

    async def one_worker() -> None:
        while queue:
            queue.pop()
            for body in bodies:
                await reviewer.review(body)

    start = time.perf_counter()
    await asyncio.gather(*(one_worker() for _ in range(CONCURRENCY)))
    return time.perf_counter() - start


async def run(kubeconfig: Path, requests: int, ttl: float) -> tuple[int, float, float]:
    loaded = kubeaccess.load_configuration(str(kubeconfig))
    api = CountingApi(functools.partial(kubeaccess.async_client_for, loaded))
    cache = ReviewCache(ttl, 0.0) if ttl else None
    reviewer = ApiAccessReviewer(api, cache=cache)
    CountingApi.posts = 0
    await drive(reviewer, CONCURRENCY)  # warm-up: connections, the first answers
    CountingApi.posts = 0
    cpu = time.process_time()
    wall = await drive(reviewer, requests)
    cpu = time.process_time() - cpu
    await api.close()
    return CountingApi.posts, wall, cpu


def allowed(cp: ControlPlane) -> bool:
    """The API server answers alice's review "allowed" (its RBAC cache has the grant)."""
    from kubernetes import client

    review = client.AuthorizationV1Api(cp.api_client()).create_subject_access_review(
        access_review(USER, "bench", PODS)
    )
    return bool(review.status.allowed)


def grant(cp: ControlPlane) -> None:
    """Let alice create Deployments and Pods everywhere: the reviews answer "allowed",
    the answers the TTL keeps."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(cp.api_client())
    rules = [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
    ]
    rbac.create_cluster_role({"metadata": {"name": "bench-guard"}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "bench-guard"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "bench-guard",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
            ],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with ControlPlane() as cp:
        grant(cp)
        wait_until(
            lambda: allowed(cp),
            timeout=30,
            description="alice's RBAC reaching the authorizer",
        )
        for ttl in (0.0, DEFAULT_ACCESS_REVIEW_ALLOWED_TTL):
            posts, wall, cpu = asyncio.run(run(cp.kubeconfig_path, args.requests, ttl))
            print(
                f"allowed-ttl {ttl:>4.0f} s: {args.requests} requests, {posts} reviews made, "
                f"{args.requests / wall:,.0f} req/s, {cpu / args.requests * 1e6:,.0f} us "
                f"client CPU per request (load average {os.getloadavg()[0]:.1f})"
            )


if __name__ == "__main__":
    main()
