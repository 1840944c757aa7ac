"""Where `icache webhook` listens.

Plain HTTP (--insecure) serves /metrics and live-API lookups without authentication,
so it listens on 127.0.0.1 unless --host says otherwise; TLS mode keeps listening on
every IPv4 address; --host :: serves IPv6. Every loopback address (127.0.0.0/8)
reaches a socket bound to 0.0.0.0, so 127.0.0.2 tells the two binds apart.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.harness.controlplane import (
    CertificateAuthority,
    free_port,
    terminate_process_group,
    wait_until,
)
from tests.samples import SAMPLES_DIR
from tests.webhook_process import spawn_webhook


@contextmanager
def _webhook(tmp_path: Path, *args: str) -> Iterator[int]:
    """A webhook accepting connections on a free port (args decide TLS and --host)."""
    port = free_port()
    log = tmp_path / "webhook.log"
    proc = spawn_webhook(
        [
            "--port",
            str(port),
            "--backends-from",
            str(SAMPLES_DIR),
            *args,
        ],
        log,
    )
    try:
        wait_until(
            lambda: _connects("127.0.0.1", port) or _connects("::1", port),
            timeout=30,
            description="webhook listening",
            abort=lambda: log.read_text() if proc.poll() is not None else None,
        )
        yield port
    finally:
        terminate_process_group(proc)


def _healthz(url: str) -> int:
    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as resp:
        return int(resp.status)


def _connects(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect((host, port))
        except OSError:
            return False
        return True


def test_insecure_listens_on_loopback_only_by_default(tmp_path: Path) -> None:
    """`--insecure` without --host binds 127.0.0.1, not every address."""
    with _webhook(tmp_path, "--insecure") as port:
        assert _healthz(f"http://127.0.0.1:{port}") == 200
        assert not _connects("127.0.0.2", port)


def test_insecure_host_flag_widens_the_bind(tmp_path: Path) -> None:
    with _webhook(tmp_path, "--insecure", "--host", "0.0.0.0") as port:
        assert _connects("127.0.0.2", port)


def test_tls_mode_keeps_listening_on_every_ipv4_address(tmp_path: Path) -> None:
    ca = CertificateAuthority("bind-test-ca")
    cert, key = ca.issue_serving(["127.0.0.1"]).write(tmp_path, "tls")
    with _webhook(tmp_path, "--tls-cert-file", str(cert), "--tls-key-file", str(key)) as port:
        assert _connects("127.0.0.2", port)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_host_ipv6_serves_on_ipv6(tmp_path: Path) -> None:
    """Documented: `--host ::` serves IPv6 (asyncio binds it IPv6-only)."""
    with _webhook(tmp_path, "--insecure", "--host", "::") as port:
        assert _healthz(f"http://[::1]:{port}") == 200
