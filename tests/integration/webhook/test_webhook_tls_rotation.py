"""Certificate rotation never causes an outage.

A real `icache webhook` serves TLS while two client threads open a fresh TLS
connection (full handshake, CA-verified) and GET /healthz in a loop. Meanwhile the
certificate files go through good pairs, a mismatched pair, a half-written pair (new
certificate, old key), a truncated certificate and deleted files. Not one handshake
may fail, and after every good pair the clients must see the new certificate.
"""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509

from tests.harness.controlplane import KeyPair, wait_until
from tests.samples import SAMPLES_DIR
from tests.webhook_process import WebhookProcess, run_webhook


@dataclass
class Traffic:
    """Steady TLS traffic against the webhook; what it saw."""

    port: int
    ca_pem: bytes
    handshakes: int = 0
    failures: list[str] = field(default_factory=list)
    serial: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, ctx: ssl.SSLContext) -> None:
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock,
                ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
            ):
                der = tls.getpeercert(binary_form=True)
                tls.sendall(
                    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                )
                reply = b""
                while chunk := tls.recv(4096):
                    reply += chunk
            if not reply.startswith(b"HTTP/1.1 200"):
                raise AssertionError(f"unexpected reply {reply[:80]!r}")
            assert der is not None
            serial = x509.load_der_x509_certificate(der).serial_number
            with self.lock:
                self.handshakes += 1
                self.serial = serial
        except Exception as exc:  # every failure is recorded, none is retried
            with self.lock:
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def run(self) -> None:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        while not self.stop.is_set():
            self.one(ctx)


@contextmanager
def traffic(hook: WebhookProcess, clients: int = 2) -> Iterator[Traffic]:
    t = Traffic(int(hook.url.rsplit(":", 1)[1]), hook.ca_pem)
    threads = [threading.Thread(target=t.run, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield t
    finally:
        t.stop.set()
        for thread in threads:
            thread.join(timeout=30)


def _serial(pair: KeyPair) -> int:
    return x509.load_pem_x509_certificate(pair.cert_pem).serial_number


def _failed_reloads(hook: WebhookProcess) -> float:
    ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
    text = urllib.request.urlopen(f"{hook.url}/metrics", context=ctx, timeout=5).read().decode()
    match = re.search(r'inferencecache_webhook_tls_reloads_total\{result="failed"\} (\S+)', text)
    return float(match.group(1)) if match else 0.0


def _write(path: Path, data: bytes) -> None:
    """A plain, non-atomic overwrite: what a careless writer (or a crash) leaves."""
    path.write_bytes(data)


def test_rotation_under_load_never_fails_a_handshake() -> None:
    with (
        run_webhook(extra_args=["--backends-from", str(SAMPLES_DIR)]) as hook,
        traffic(hook) as seen,
    ):
        cert, key = hook.cert_path, hook.key_path

        def settle_on(pair: KeyPair) -> None:
            expected = _serial(pair)
            wait_until(
                lambda: seen.serial == expected,
                timeout=30,
                description=f"clients see certificate {expected:x}",
            )

        def rejected(write: list[tuple[Path, bytes | None]]) -> None:
            """Apply a bad state; wait until the webhook has tried and refused it."""
            before = _failed_reloads(hook)
            for path, data in write:
                if data is None:
                    path.unlink(missing_ok=True)
                else:
                    _write(path, data)
            wait_until(
                lambda: _failed_reloads(hook) > before,
                timeout=30,
                description="the bad certificate state was refused",
            )

        wait_until(lambda: seen.handshakes >= 5, timeout=30, description="traffic flowing")
        for _ in range(2):
            good = hook.ca.issue_serving(["127.0.0.1"])
            _write(key, good.key_pem)
            _write(cert, good.cert_pem)
            settle_on(good)

            other = hook.ca.issue_serving(["127.0.0.1"])
            rejected([(cert, other.cert_pem), (key, hook.ca.issue_serving().key_pem)])

            # Half-written: the new certificate is there, its key not yet.
            rejected([(key, good.key_pem), (cert, other.cert_pem)])
            _write(key, other.key_pem)
            settle_on(other)

            truncated = hook.ca.issue_serving(["127.0.0.1"])
            rejected([(key, truncated.key_pem), (cert, truncated.cert_pem[:200])])
            rejected([(cert, None), (key, None)])
            _write(key, truncated.key_pem)
            _write(cert, truncated.cert_pem)
            settle_on(truncated)

        count = seen.handshakes
        wait_until(lambda: seen.handshakes > count + 10, timeout=30, description="more traffic")
        assert "certificate reload failed" in hook.log_path.read_text()
    assert seen.failures == [], seen.failures[:5]
    assert seen.handshakes > 50


def test_a_bad_pair_at_a_reload_keeps_the_old_certificate_serving() -> None:
    """The single-shot version: a mismatched pair is refused, the old chain serves on."""
    with run_webhook(extra_args=["--backends-from", str(SAMPLES_DIR)]) as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        first = Traffic(port, hook.ca_pem)
        ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
        first.one(ctx)
        served = first.serial
        before = _failed_reloads(hook)
        _write(hook.cert_path, hook.ca.issue_serving(["127.0.0.1"]).cert_pem)
        wait_until(lambda: _failed_reloads(hook) > before, timeout=30, description="refused")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            first.one(ctx)
        assert first.failures == []
        assert first.serial == served
