"""Overload degrades, it does not fall over.

A real `icache webhook` (the worker count, body limit and in-flight budget it ships with)
is flooded with maximum-size bodies of the most expensive shape (``[{},{},...]``: the
most Python objects per byte) on all three routes. Throughout, /healthz answers within
the readiness probe's 2 s timeout, the process's RSS (read from /proc) stays under
the container memory limit of the shipped Deployment, and every flood request gets a
200, a 503 with Retry-After, or a 400/413: never another 5xx or a dropped connection.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from icache_install.manifests_cli import render_manifests
from shared.quantity import parse_quantity
from tests.harness.controlplane import (
    child_pids,
    free_port,
    tail,
    terminate_process_group,
    wait_until,
)
from tests.samples import SAMPLES_DIR
from tests.webhook_process import spawn_webhook
from webhook_svc import webhook_cli
from webhook_svc.app import PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB

FLOOD_SECONDS = 20
FLOOD_CLIENTS = 12
HEALTH_TIMEOUT = 2.0  # the readinessProbe's timeoutSeconds


def _container() -> dict[str, Any]:
    (deployment,) = [
        d
        for d in render_manifests()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "inference-cache-webhook"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    out: dict[str, Any] = container
    return out


def _container_memory_limit() -> int:
    return int(parse_quantity(_container()["resources"]["limits"]["memory"]))


# The shipped Deployment's sizing flags (worker count, per-worker budget and connection
# cap): the flood runs the configuration the memory limit was sized for.
_SIZING = ("--workers=", "--max-inflight-bytes=", "--limit-concurrency=", "--max-body-bytes=")


def _shipped_sizing_args() -> list[str]:
    return [a for a in _container()["args"] if a.startswith(_SIZING)]


def _default_max_body() -> int:
    parser = argparse.ArgumentParser()
    webhook_cli.add_arguments(parser)
    return int(parser.parse_args([]).max_body_bytes)


def _rss(pid: int) -> int:
    """RSS of ``pid`` and its children (the workers): what the container holds."""
    total = 0
    for proc in [pid, *child_pids(pid)]:
        try:
            status = Path(f"/proc/{proc}/status").read_text()
        except OSError:
            continue  # exited meanwhile
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def _bodies(limit: int) -> dict[str, bytes]:
    """Bodies just under ``limit``: a bare list, and AdmissionReviews carrying the list
    where each route keeps it (a CacheBackend spec field, a Pod spec field)."""

    def fill(template: str) -> bytes:
        room = limit - len(template) - 16
        junk = "[" + ",".join(["{}"] * (room // 3)) + "]"
        body = template.replace('"@@"', junk).encode()
        assert len(body) <= limit
        return body

    cachebackend = (
        '{"request":{"uid":"flood","operation":"CREATE","namespace":"default","object":'
        '{"apiVersion":"inferencecache.io/v1alpha1","kind":"CacheBackend",'
        '"metadata":{"name":"x"},"spec":{"runtime":"VLLM","junk":"@@"}}}}'
    )
    pod = (
        '{"request":{"uid":"flood","operation":"CREATE","namespace":"default","object":'
        '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"vllm-llama"}},'
        '"spec":{"containers":[{"name":"vllm","image":"vllm/vllm-openai"}],"junk":"@@"}}}}'
    )
    return {
        PATH_VALIDATE_CB: fill(cachebackend),
        PATH_MUTATE_CB: fill(cachebackend),
        PATH_MUTATE_POD: fill(pod),
        "raw": fill('"@@"'),
    }


def test_flood_of_maximum_size_bodies_keeps_health_and_memory(tmp_path: Path) -> None:
    limit_bytes = _container_memory_limit()
    bodies = _bodies(_default_max_body())
    port = free_port()
    log = tmp_path / "webhook.log"
    proc = spawn_webhook(
        [
            "--insecure",
            "--port",
            str(port),
            "--backends-from",
            str(SAMPLES_DIR),
            "--shutdown-drain-seconds",
            "0",
            *_shipped_sizing_args(),
        ],
        log,
    )
    url = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    lock = threading.Lock()

    def flood(index: int) -> None:
        routes = [PATH_VALIDATE_CB, PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB]
        with httpx.Client(base_url=url, timeout=60) as client:
            n = index
            while not stop.is_set():
                route = routes[n % len(routes)]
                n += 1
                body = bodies["raw"] if n % 5 == 0 else bodies[route]
                try:
                    response = client.post(route, content=body)
                except httpx.HTTPError as exc:
                    with lock:
                        problems.append(f"{route}: {type(exc).__name__}: {exc}")
                    continue
                code = response.status_code
                with lock:
                    outcomes[str(code)] += 1
                    if code == 503 and "retry-after" not in response.headers:
                        problems.append("503 without Retry-After")
                    elif code >= 500 and code != 503:
                        problems.append(f"{route}: {code} {response.text[:200]}")

    peak_rss = 0
    slowest_health = 0.0
    try:
        wait_until(
            lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200,
            timeout=30,
            description="webhook up",
            abort=lambda: tail(log) if proc.poll() is not None else None,
        )
        threads = [threading.Thread(target=flood, args=(i,)) for i in range(FLOOD_CLIENTS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + FLOOD_SECONDS
        health_failures: list[str] = []
        while time.monotonic() < deadline:
            peak_rss = max(peak_rss, _rss(proc.pid))
            if peak_rss >= limit_bytes:
                break  # the container would have been OOM-killed: stop here
            started = time.monotonic()
            try:
                status = httpx.get(f"{url}/healthz", timeout=HEALTH_TIMEOUT).status_code
            except httpx.HTTPError as exc:
                health_failures.append(f"{type(exc).__name__}: {exc}")
            else:
                if status != 200:
                    health_failures.append(f"status {status}")
            slowest_health = max(slowest_health, time.monotonic() - started)
            peak_rss = max(peak_rss, _rss(proc.pid))
            time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        stop.set()
        terminate_process_group(proc)
    summary: dict[str, Any] = {
        "peak_rss_mib": peak_rss // 2**20,
        "limit_mib": limit_bytes // 2**20,
        "slowest_healthz_s": round(slowest_health, 3),
        "outcomes": dict(outcomes),
    }
    print(summary)
    assert peak_rss < limit_bytes, summary
    assert health_failures == [], (health_failures[:5], summary)
    assert problems == [], (problems[:5], summary)
    assert outcomes["200"] > 0, summary
