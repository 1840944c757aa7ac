"""API watches each process keeps open, on the bare control plane.

Counts the kube-apiserver's open WATCH streams (``apiserver_longrunning_requests
{verb="WATCH"}``, less what it held before our processes started) with four
host-only backends in two namespaces, each namespace's two selecting on the same
label key (G = 2 engine-selector groups): the leading dispatcher alone, then with one
worker process (``--pool threads``), then with four (``--pool prefork
--concurrency 4``, every child past its first task: a prefork child builds its caches
on its first task, so the resync runs every 2 s until all have).

    .venv/bin/python benchmarks/bench_watches.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_fleet import scrape, spawn, stop, wait_for  # noqa: E402
from kubeio import client as k  # noqa: E402
from shared.constants import INSTALL_NAMESPACE  # noqa: E402
from tests.e2e.conftest import install_cluster  # noqa: E402
from tests.harness.controlplane import ControlPlane  # noqa: E402
from tests.harness.redis_server import RedisServer  # noqa: E402

NAMESPACES = ("watches-a", "watches-b")
SELECTOR_KEY = "app"
# How long the open-watch count must hold still to be read.
SETTLED_SECONDS = 10.0


def backend(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {"name": name, "annotations": {"inferencecache.io/require-kv-events": "false"}},
        "spec": {"runtime": "VLLM", "engineSelector": {"matchLabels": {SELECTOR_KEY: value}}},
    }


def open_watches(cp: ControlPlane) -> int:
    return int(scrape(cp).open_watches)


def settled(cp: ControlPlane, above: int, timeout: float = 180.0) -> int:
    """The open-watch count once it is above ``above`` and has not moved for
    SETTLED_SECONDS."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = open_watches(cp)
        if now != last:
            last, since = now, time.monotonic()
        elif now > above and time.monotonic() - since >= SETTLED_SECONDS:
            return now
        time.sleep(1.0)
    raise RuntimeError(f"open watches did not settle above {above} (last {last})")


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="icache-bench-watches-"))
    rs = RedisServer()
    rs.start()
    cp = ControlPlane()
    cp.start()
    procs = []
    try:
        cluster = install_cluster(cp, workdir / "kubeconfigs")
        kube = cluster.kube
        url = rs.url_for_db(1)
        redis.Redis.from_url(url).flushdb()
        for i, ns in enumerate(NAMESPACES):
            kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
            wait_for(
                lambda ns=ns: cp.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200,
                30,
                "the namespace's default ServiceAccount",
            )
            for j in range(2):
                kube.create(k.CACHEBACKENDS, ns, backend(f"cb-{j}", f"engine-{i}-{j}"))
        floor = settled(cp, -1)
        dispatcher = spawn(
            ["dispatcher", "--kubeconfig", str(cluster.dispatcher_kubeconfig),
             "--redis-url", url, "--lease-namespace", INSTALL_NAMESPACE,
             "--resync-period", "2", "--log-level", "WARNING"],
            workdir / "dispatcher.log",
        )  # fmt: skip
        procs.append(dispatcher)
        leader = settled(cp, floor) - floor
        rows = [("leading dispatcher alone", leader)]
        for label, pool in (
            ("1 worker process (--pool threads)", ["--pool", "threads", "--concurrency", "4"]),
            ("4 worker processes (--pool prefork --concurrency 4)",
             ["--pool", "prefork", "--concurrency", "4"]),
        ):  # fmt: skip
            worker = spawn(
                ["worker", "--kubeconfig", str(cluster.worker_kubeconfig), "--redis-url", url,
                 *pool, "--log-level", "WARNING"],
                workdir / f"worker-{pool[1]}.log",
            )  # fmt: skip
            total = settled(cp, floor + leader) - floor
            rows.append((label, total))
            stop([worker])
            wait_for(
                lambda: open_watches(cp) - floor == leader, 120, "the worker's watches to close"
            )
        print(f"floor (API server's own): {floor}")
        for label, count in rows:
            print(f"{label}: {count} watches (leader included)")
    finally:
        stop(procs)
        cp.stop()
        rs.stop()
    print(f"logs: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
