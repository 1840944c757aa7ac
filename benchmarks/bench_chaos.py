"""Chaos benchmark: time to reconverge N backends after each fault.

Starts its own kube-apiserver + etcd and Redis-compatible server, installs the CRD
and RBAC, runs two `icache dispatcher` and two `icache worker` processes as their
ServiceAccounts, and creates N CacheBackends of mixed shapes (managed Deployment,
StatefulSet and HPA variants, External, EventsOnly, host-only). Then, for each fault,
every changeable backend is changed and the fault injected:

* worker-sigkill       a worker SIGKILLed mid-reconcile, three times (fresh changes each)
* redis-restart-empty  Redis SIGKILLed mid-reconcile, back with no data
* apiserver-restart    kube-apiserver restarted
* etcd-restart         etcd restarted (data kept)
* leader-sigkill       the leading dispatcher SIGKILLed (the standby waits out the lease)

and the time until every backend shows the change is printed. Each case must also
end with no duplicate owned object, no status field lost, no key reconciled by two
workers at once, and zero controller writes in the idle window (30 s) afterwards;
a violated invariant fails the run.

    .venv/bin/python benchmarks/bench_chaos.py                   # N=200, every fault
    .venv/bin/python benchmarks/bench_chaos.py -n 50 --faults leader-sigkill,etcd-restart
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.chaos import FAULTS, Chaos, run_fault  # noqa: E402
from tests.e2e.conftest import Stack, install_cluster  # noqa: E402
from tests.harness.controlplane import ControlPlane  # noqa: E402
from tests.harness.redis_server import RedisServer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="CacheBackends (default 200)")
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated faults")
    parser.add_argument("--idle-window", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4, help="reconciles per worker")
    parser.add_argument("--keep", action="store_true", help="keep the process logs")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {sorted(FAULTS)}")

    workdir = Path(tempfile.mkdtemp(prefix="icache-bench-chaos-"))
    cp = ControlPlane()
    redis_server = RedisServer()
    results: list[tuple[str, float]] = []
    stack: Stack | None = None
    try:
        t0 = time.monotonic()
        cp.start()
        redis_server.start()
        cluster = install_cluster(cp, workdir / "kubeconfigs")
        stack = Stack(cluster, redis_server, workdir, db=0)
        chaos = Chaos(
            cluster,
            stack,
            n=args.n,
            idle_window=args.idle_window,
            converge_timeout=max(300.0, args.n * 3.0),
            log=lambda msg: print(msg, flush=True),
        )
        chaos.start(workers=args.workers, concurrency=args.concurrency)
        print(
            f"N={args.n}: {args.workers} workers x {args.concurrency}, 2 dispatchers; "
            f"created and converged in {time.monotonic() - t0:.1f}s (control plane included)",
            flush=True,
        )
        for fault in faults:
            options = {"kills": 3} if fault == "worker-sigkill" else {}
            took = run_fault(chaos, fault, **options)
            results.append((fault, took))
            print(
                f"{fault:22s} reconverged in {took:6.1f}s; invariants hold; "
                f"0 writes in {args.idle_window:.0f}s idle",
                flush=True,
            )
    except BaseException:
        if stack is not None:
            print(stack.logs()[-20000:], file=sys.stderr)
        raise
    finally:
        if stack is not None:
            stack.stop()
        redis_server.stop()
        cp.stop()
        if args.keep:
            print(f"logs kept in {workdir}")
        else:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    print("\ntime to reconverge (s), N =", args.n)
    for fault, took in results:
        print(f"  {fault:22s} {took:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
