"""Liveness and readiness of the worker and the dispatcher.

Real processes on a real API server and a real Redis-compatible server; the Redis
is frozen with SIGSTOP, which is what a dead node looks like to its clients.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from tests.e2e.conftest import Cluster, Proc, Stack, poll
from tests.harness.controlplane import free_port

LIVENESS_TIMEOUT = 4.0


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_probe(
    proc: Proc, port: int, path: str, code: int, timeout: float, failing: str | None = None
) -> dict[str, Any]:
    """Poll until ``path`` answers ``code`` (and, with ``failing``, names that check)."""

    def check() -> dict[str, Any] | None:
        got, body = probe(port, path)
        if got != code or (failing and failing not in body.get("failures", {})):
            return None
        return body

    return poll(check, timeout=timeout, what=f"{proc.name} {path} -> {code}", interval=0.1)


def test_a_frozen_redis_makes_both_unready_and_a_stuck_worker_consumer_unhealthy(
    cluster: Cluster, stack: Stack
) -> None:
    """Readiness needs Redis and the API server; the worker's liveness follows its
    Celery consumer loop, which gets stuck reconnecting to a broker that does not
    answer; the dispatcher stays alive (it gives the Lease up instead of wedging)."""
    wport, dport = free_port(), free_port()
    bound = ["--liveness-timeout", str(LIVENESS_TIMEOUT), "--redis-timeout", "1"]
    worker = stack.start_worker(extra=["--metrics-port", str(wport), *bound])
    dispatcher = stack.start_dispatcher(extra=["--metrics-port", str(dport), *bound])
    for proc, port in ((worker, wport), (dispatcher, dport)):
        wait_probe(proc, port, "/readyz", 200, timeout=60)
        wait_probe(proc, port, "/healthz", 200, timeout=30)
    code, metrics = 0, b""
    with urllib.request.urlopen(f"http://127.0.0.1:{wport}/metrics", timeout=5) as resp:
        code, metrics = resp.status, resp.read()
    assert code == 200
    assert b"inferencecache_active_workers" in metrics

    with stack.redis_server.frozen():
        frozen_at = time.monotonic()
        body = wait_probe(worker, wport, "/healthz", 503, timeout=60)
        unhealthy_after = time.monotonic() - frozen_at
        assert body["stale"] == ["consumer-loop"]
        for proc, port in ((worker, wport), (dispatcher, dport)):
            body = wait_probe(proc, port, "/readyz", 503, timeout=30, failing="redis")
            assert "apiserver" not in body["failures"], body
        # The dispatcher's loops keep turning: it is not restarted for a Redis outage.
        code, body = probe(dport, "/healthz")
        assert code == 200, body
    # The consumer loop waits on its BRPOP until kombu's health check declares the
    # connection dead (brpop timeout + up to two 10 s check intervals); from then on it
    # is stuck reconnecting, and liveness fails once the bound has passed.
    assert unhealthy_after <= 1 + 2 * 10 + LIVENESS_TIMEOUT + 5, unhealthy_after

    for proc, port in ((worker, wport), (dispatcher, dport)):
        wait_probe(proc, port, "/readyz", 200, timeout=60)
        wait_probe(proc, port, "/healthz", 200, timeout=60)


def test_readiness_waits_for_a_reachable_redis(cluster: Cluster, stack: Stack) -> None:
    """A worker pointed at a Redis that is not there is alive (its process runs) but
    never ready."""
    port = free_port()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    worker = stack._spawn(
        "worker-nowhere",
        [
            "worker",
            "--kubeconfig", str(cluster.worker_kubeconfig),
            "--redis-url", dead,
            "--metrics-port", str(port),
            "--redis-timeout", "1",
        ],
    )  # fmt: skip
    body = wait_probe(worker, port, "/readyz", 503, timeout=60, failing="redis")
    assert "apiserver" not in body["failures"], body


def test_a_worker_whose_consumer_loop_is_blocked_by_a_reconcile_turns_unhealthy(
    cluster: Cluster, stack: Stack
) -> None:
    """With the solo pool a reconcile runs on the consumer loop itself; one hanging on
    an API server that does not answer (SIGSTOP) blocks the loop, and /healthz turns
    503 once the bound has passed. A threads-pool worker in the same outage keeps its
    loop turning (its reconciles hang on other threads) and stays alive."""
    solo_port, threads_port = free_port(), free_port()
    bound = ["--liveness-timeout", str(LIVENESS_TIMEOUT)]
    # --reads api: every reconcile reads the API server (from the watch caches an idle
    # reconcile makes no request that could hang).
    bound = [*bound, "--reads", "api"]
    solo = stack.start_worker(
        "worker-solo",
        concurrency=1,
        extra=["--pool", "solo", "--metrics-port", str(solo_port), *bound],
    )
    threads = stack.start_worker(
        "worker-threads", extra=["--metrics-port", str(threads_port), *bound]
    )
    stack.start_dispatcher()
    ns = cluster.namespace()
    for i in range(4):
        cluster.create_cb(ns, f"cb-{i}", {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}})
    for i in range(4):
        cluster.wait_cb(
            ns,
            f"cb-{i}",
            lambda o: bool((o.get("status") or {}).get("observedGeneration")),
            "status",
        )
    for proc, port in ((solo, solo_port), (threads, threads_port)):
        wait_probe(proc, port, "/healthz", 200, timeout=30)

    # The resync (every 2 s) keeps handing keys to both workers; their reconciles'
    # first GET hangs until the API server is continued.
    with cluster.cp.apiserver_paused():
        body = wait_probe(solo, solo_port, "/healthz", 503, timeout=25)
        assert body["stale"] == ["consumer-loop"]
        code, body = probe(threads_port, "/healthz")
        assert code == 200, body
    wait_probe(solo, solo_port, "/healthz", 200, timeout=60)
