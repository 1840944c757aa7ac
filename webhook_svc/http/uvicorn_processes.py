"""Several uvicorn server processes behind one listening socket (``icache webhook --workers``).

One Python process answers on one core; a replica with two cores needs two. The
supervisor binds the port, forks the workers and then only supervises: every worker
builds its own app, API client, TLS context and certificate reloader after the fork,
so workers share nothing but the socket (the kernel spreads connections between the
processes blocked in accept). Readiness and TLS reload therefore hold in each worker
exactly as in a single-process webhook. Prometheus counters go through
prometheus_client's multiprocess mode, so /metrics sums every worker.

SIGTERM/SIGINT to the supervisor go to every worker, each drains as uvicorn does, and
the supervisor exits when they all have. A worker that exits on its own (a crash, a
failed start) takes the replica down with its exit code: the kubelet restarts the
container and the readiness probe keeps traffic away meanwhile, rather than a
supervisor hiding a crash loop.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

log = logging.getLogger("icache.webhook")

_FORWARDED: Final = (signal.SIGTERM, signal.SIGINT)
_CGROUP_V2_CPU_MAX: Final = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1_QUOTA: Final = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
_CGROUP_V1_PERIOD: Final = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def cgroup_cpu_limit(
    v2: Path = _CGROUP_V2_CPU_MAX,
    v1_quota: Path = _CGROUP_V1_QUOTA,
    v1_period: Path = _CGROUP_V1_PERIOD,
) -> float | None:
    """The container's CPU limit in CPUs (cgroup v2 cpu.max, else v1 CFS quota); None: none."""
    try:
        quota, period = v2.read_text().split()[:2]
        if quota == "max":
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int(v1_quota.read_text())
        period_us = int(v1_period.read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def available_cpus(
    affinity: int | None = None, limit: Callable[[], float | None] = cgroup_cpu_limit
) -> int:
    """CPUs this container may use: its CPU set, capped by its CPU limit rounded up."""
    count = affinity if affinity is not None else len(os.sched_getaffinity(0))
    cpus = limit()
    if cpus is not None:
        count = min(count, max(1, math.ceil(cpus)))
    return max(1, count)


def share_metrics_between_workers() -> str:
    """Point prometheus_client at a fresh directory shared by the workers, so /metrics
    (whichever worker answers it) reports the sum over all of them, not one worker's
    share. Call before prometheus_client is imported; returns the directory."""
    if "prometheus_client" in sys.modules:  # a programming error: fail loudly
        raise RuntimeError(
            "prometheus_client was imported before the workers' metrics directory was set"
        )
    directory = tempfile.mkdtemp(prefix="icache-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The listening socket every worker accepts on (IPv6 when the host is one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def fork_workers(sock: socket.socket, workers: int) -> int | None:
    """Fork ``workers`` children. In a child: None (go on and serve ``sock``). In the
    supervisor: block until they are gone, then the exit code."""
    # Signals held until the supervisor's handlers are in place and the children
    # have their default ones back: a SIGTERM during the forks is not lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            for signum in _FORWARDED:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
            return None
        children.append(pid)
    sock.close()  # the workers hold it; the supervisor accepts nothing
    return _supervise(children)


def _supervise(children: list[int]) -> int:
    alive = set(children)
    stopping = False
    code = 0

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    for signum in _FORWARDED:
        signal.signal(signum, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    log.info("webhook workers started", extra={"workers": len(children), "pids": children})
    while alive:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid not in alive:
            continue
        alive.discard(pid)
        exit_code = os.waitstatus_to_exitcode(status)
        if not stopping:
            log.error(
                "webhook worker exited; stopping the others",
                extra={"pid": pid, "exit_code": exit_code},
            )
            code = exit_code if exit_code > 0 else 1
            stop(signal.SIGTERM, None)
    return code
