"""`icache webhook --workers N`: N processes that share nothing but the port.

Each worker must keep what a single-process webhook guarantees: it answers, its TLS
certificate is reloaded in place, SIGTERM drains it; /metrics counts every worker; a
worker that dies takes the replica down instead of leaving it half-served.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness.controlplane import (
    child_pids,
    free_port,
    tail,
    terminate_process_group,
    wait_until,
)
from tests.samples import ROOT, SAMPLES_DIR
from tests.webhook_process import run_webhook, served_serial, spawn_webhook

ICACHE = str(Path(sys.executable).parent / "icache")
REVIEW = (ROOT / "examples" / "admission" / "create-vllm-host-only.json").read_bytes()
VALIDATE = "/validate-inferencecache-io-v1alpha1-cachebackend"


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    port = free_port()
    log_path = tmp_path / "webhook.log"
    proc = spawn_webhook(
        [
            *("--insecure", "--host", "127.0.0.1", "--port", str(port)),
            *("--backends-from", str(SAMPLES_DIR), "--workers", "2"),
        ],
        log_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: (
                len(child_pids(proc.pid)) == 2
                and httpx.get(f"{url}/readyz", timeout=2).status_code == 200
            ),
            timeout=60,
            description="two webhook workers",
            abort=lambda: tail(log_path) if proc.poll() is not None else None,
        )
        yield proc, url, log_path
    finally:
        terminate_process_group(proc)


def _validate_on_new_connection(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:  # a new connection each time
        reply = client.post(VALIDATE, content=REVIEW, headers={"Content-Type": "application/json"})
    assert reply.status_code == 200
    assert reply.json()["response"]["allowed"] is True


def test_workers_answer_and_metrics_count_all_of_them(
    two_workers: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, url, _ = two_workers
    before = _admissions(url)
    for _ in range(40):
        _validate_on_new_connection(url)
    # Whichever worker answers /metrics, it reports what both answered.
    for _ in range(6):
        assert _admissions(url) - before == 40
    assert len(child_pids(proc.pid)) == 2


def _admissions(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("inferencecache_webhook_admissions_total{") and VALIDATE in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_sigterm_to_the_supervisor_stops_every_worker(
    two_workers: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, _, log_path = two_workers
    workers = child_pids(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, tail(log_path)
    wait_until(
        lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers),
        timeout=10,
        description="every worker gone",
    )


def test_a_dead_worker_takes_the_replica_down(
    two_workers: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    """A supervisor that kept serving on half its workers would hide a crash loop."""
    proc, _, log_path = two_workers
    first, second = child_pids(proc.pid)
    os.kill(first, signal.SIGKILL)
    assert proc.wait(timeout=30) != 0
    wait_until(lambda: not Path(f"/proc/{second}").exists(), timeout=10, description="exit")
    assert "webhook worker exited" in log_path.read_text()


def test_every_worker_reloads_the_tls_certificate() -> None:
    with run_webhook(extra_args=["--backends-from", str(SAMPLES_DIR), "--workers", "2"]) as hook:
        assert hook.proc is not None
        assert len(child_pids(hook.proc.pid)) == 2
        port = int(hook.url.rsplit(":", 1)[1])
        first = served_serial(port, hook.ca_pem)
        cert, key = hook.ca.issue_serving(["127.0.0.1"]).write(hook.cert_path.parent, "rotated")
        key.replace(hook.key_path)
        cert.replace(hook.cert_path)

        # Many new handshakes land on both workers: all must serve the new chain.
        def all_rotated() -> bool:
            return all(served_serial(port, hook.ca_pem) != first for _ in range(20))

        wait_until(all_rotated, timeout=20, description="rotated certificate on every worker")
        serials = {served_serial(port, hook.ca_pem) for _ in range(40)}
        assert first not in serials, sorted(map(str, serials))
        assert len(serials) == 1, sorted(map(str, serials))
