"""Reconcile throughput and idle cost against a real kube-apiserver and Redis.

For each N (CacheBackends) and W (worker processes) this starts a fresh
`icache dispatcher` and W `icache worker` processes, creates N managed
LMCacheServer backends in a new namespace, and reports the time until every one
has a converged status (observedGeneration current and the managed endpoint
published). It then waits for the controller to go quiet and counts the API
requests one idle resync of all N backends costs (and checks it writes nothing).

    .venv/bin/python benchmarks/bench_reconcile.py                 # N=100,1000  W=1,2
    .venv/bin/python benchmarks/bench_reconcile.py --sizes 50 --workers 1

Everything runs on loopback; the control plane binaries come from
tests/controlplane/build.sh (built on first use).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubeio import client as k  # noqa: E402
from tests.e2e.conftest import converged_with_endpoint  # noqa: E402
from tests.harness.controlplane import ControlPlane  # noqa: E402
from tests.harness.redis_server import RedisServer  # noqa: E402

CONTROLLER_USER = "icache-bench-controller"
SPEC: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
}


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    fh = log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "icache_cli.main", *args],
            cwd=REPO,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        fh.close()


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def run_case(
    cp: ControlPlane,
    kube: k.Kube,
    redis_server: RedisServer,
    kubeconfig: Path,
    workdir: Path,
    n: int,
    workers: int,
    concurrency: int,
    resync: float,
    db: int,
) -> dict[str, Any]:
    url = redis_server.url_for_db(db)
    redis.Redis.from_url(url).flushdb()
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    tag = f"n{n}-w{workers}"
    procs = [
        spawn(
            [
                "dispatcher", "--kubeconfig", str(kubeconfig), "--redis-url", url,
                "--lease-namespace", "default", "--lease-name", f"bench-{tag}-{ns}",
                "--identity", f"bench-{tag}", "--resync-period", str(resync),
                "--log-level", "WARNING",
            ],
            workdir / f"dispatcher-{tag}.log",
        )
    ]  # fmt: skip
    for i in range(workers):
        procs.append(
            spawn(
                [
                    "worker", "--kubeconfig", str(kubeconfig), "--redis-url", url,
                    "--concurrency", str(concurrency), "--log-level", "WARNING",
                ],
                workdir / f"worker-{tag}-{i}.log",
            )
        )  # fmt: skip
    try:
        time.sleep(3.0)  # let the worker(s) connect; not part of the measurement

        def create(i: int) -> None:
            kube.create(
                k.CACHEBACKENDS,
                ns,
                {
                    "apiVersion": "inferencecache.io/v1alpha1",
                    "kind": "CacheBackend",
                    "metadata": {
                        "name": f"cb-{i:05d}",
                        "annotations": {"inferencecache.io/require-kv-events": "false"},
                    },
                    "spec": SPEC,
                },
            )

        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(n)))
        created = time.monotonic() - t0
        while True:
            items = kube.list(k.CACHEBACKENDS, ns).get("items") or []
            done = sum(1 for o in items if converged_with_endpoint(o))
            if done == n:
                break
            if time.monotonic() - t0 > 1800:
                raise RuntimeError(f"{tag}: only {done}/{n} converged after 30 min")
            time.sleep(0.5)
        total = time.monotonic() - t0

        # Idle cost: wait for quiet, then measure whole resync periods.
        def controller_events(since: int) -> list[Any]:
            return [
                e
                for e in cp.audit_events(since)
                if e.user == CONTROLLER_USER and e.resource != "leases"
            ]

        while True:
            mark = cp.audit_offset()
            time.sleep(resync + 1)
            if not [e for e in controller_events(mark) if e.is_write]:
                break
        periods = 2
        mark = cp.audit_offset()
        time.sleep(resync * periods)
        events = controller_events(mark)
        writes = [e for e in events if e.is_write]
        return {
            "n": n,
            "workers": workers,
            "create_s": created,
            "converge_s": total,
            "per_s": n / total,
            "idle_requests_per_resync": len(events) / periods,
            "idle_requests_per_backend": len(events) / periods / n,
            "idle_writes": len(writes),
        }
    finally:
        stop(procs)
        # The next case's dispatcher watches every namespace: leave nothing behind.
        kube.request("DELETE", k.CACHEBACKENDS.collection(ns))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--concurrency", type=int, default=4, help="threads per worker process")
    ap.add_argument("--resync-period", type=float, default=10.0)
    args = ap.parse_args()
    # A SIGTERM (e.g. from `timeout`) still runs the finally blocks that stop the
    # control plane, Redis and the controller processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(x) for x in args.sizes.split(",")]
    worker_counts = [int(x) for x in args.workers.split(",")]

    workdir = Path(tempfile.mkdtemp(prefix="icache-bench-"))
    # Room for a ClusterIP per backend (the harness default /24 holds ~250).
    cp = ControlPlane(extra_apiserver_args=["--service-cluster-ip-range=10.0.0.0/16"])
    cp.start()
    rs = RedisServer()
    rs.start()
    results = []
    try:
        kube = k.Kube(cp.api_client())
        crd = yaml.safe_load(
            (REPO / "manifests/crd/inferencecache.io_cachebackends.yaml").read_text()
        )
        kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)
        deadline = time.monotonic() + 30
        while True:
            try:
                kube.list(k.CACHEBACKENDS)
                break
            except k.ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        kubeconfig = cp.write_kubeconfig(
            workdir / "controller.kubeconfig",
            cp.client_keypair(CONTROLLER_USER, ["system:masters"]),
        )
        db = 1
        for n in sizes:
            for w in worker_counts:
                r = run_case(
                    cp,
                    kube,
                    rs,
                    kubeconfig,
                    workdir,
                    n,
                    w,
                    args.concurrency,
                    args.resync_period,
                    db,
                )
                db += 1
                results.append(r)
                print(
                    f"N={r['n']:5d} workers={r['workers']} (x{args.concurrency} threads): "
                    f"converged in {r['converge_s']:7.2f}s ({r['per_s']:6.1f} backends/s; "
                    f"creating took {r['create_s']:.2f}s) | idle resync: "
                    f"{r['idle_requests_per_resync']:.0f} requests "
                    f"({r['idle_requests_per_backend']:.1f}/backend), {r['idle_writes']} writes",
                    flush=True,
                )
    finally:
        rs.stop()
        cp.stop()
    print(f"logs: {workdir}")
    return 0 if all(r["idle_writes"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
