"""Graceful shutdown loses no pod wiring.

A real `icache webhook` (TLS) gets SIGTERM while requests are in flight and while
clients keep sending. Readiness flips to 503, every request the server accepted gets
a complete AdmissionReview (those in flight across SIGTERM, those sent during the
drain, one whose body only arrives after the listener closed), and the process then
exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.controlplane import (
    CertificateAuthority,
    free_port,
    terminate_process_group,
    wait_until,
)
from tests.samples import ROOT, SAMPLES_DIR
from tests.webhook_process import WebhookProcess, run_webhook, spawn_webhook, wait_healthy
from webhook_svc.http.lifecycle import refuse_new_connections

POD_PATH = "/mutate--v1-pod"
DRAIN_SECONDS = 6


def _pod_review(uid: str) -> bytes:
    review: dict[str, Any] = json.loads(
        (ROOT / "examples" / "admission" / "pod-vllm-host-only.json").read_text()
    )
    review["request"]["uid"] = uid
    return json.dumps(review).encode()


def _port(hook: WebhookProcess) -> int:
    return int(hook.url.rsplit(":", 1)[1])


class SlowRequest:
    """A POST whose headers and first half of the body are sent now, then one byte every
    half second (a slow client, not a stalled one: the webhook cuts a body that gets no
    byte for 2 s), and the rest on ``finish``."""

    TRICKLE_SECONDS = 0.5

    def __init__(self, hook: WebhookProcess, uid: str) -> None:
        self.uid = uid
        self.body = _pod_review(uid)
        ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
        raw = socket.create_connection(("127.0.0.1", _port(hook)), timeout=30)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        head = (
            f"POST {POD_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(self.body)}\r\n\r\n"
        ).encode()
        self.sent = len(self.body) // 2
        self.sock.sendall(head + self.body[: self.sent])
        self._stop = threading.Event()
        self._trickle = threading.Thread(target=self._trickle_bytes, daemon=True)
        self._trickle.start()

    def _trickle_bytes(self) -> None:
        # Always leaves the last byte for finish(): the body is complete only then.
        while not self._stop.wait(self.TRICKLE_SECONDS) and self.sent < len(self.body) - 1:
            self.sock.sendall(self.body[self.sent : self.sent + 1])
            self.sent += 1

    def finish(self) -> dict[str, Any]:
        """Send the rest; the complete AdmissionReview that comes back."""
        self._stop.set()
        self._trickle.join(timeout=10)  # one TLS socket, one writer at a time
        self.sock.sendall(self.body[self.sent :])
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed without a response: {reply!r}"
            reply += chunk
        head, _, rest = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed mid-response"
            rest += chunk
        self.sock.close()
        review: dict[str, Any] = json.loads(rest[:length])
        return review


@dataclass
class Clients:
    """Keep-alive clients posting pod reviews until told to stop."""

    hook: WebhookProcess
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, name: str) -> None:
        ctx = ssl.create_default_context(cadata=self.hook.ca_pem.decode())
        with httpx.Client(base_url=self.hook.url, verify=ctx, timeout=30) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                uid = f"{name}-{n}"
                try:
                    response = client.post(POD_PATH, content=_pod_review(uid))
                    body = response.json()
                    assert response.status_code == 200, response.status_code
                    assert body["response"]["uid"] == uid
                    assert body["response"]["allowed"]
                except Exception as exc:  # a dropped or broken answer is the failure
                    with self.lock:
                        self.failures.append(f"{uid}: {type(exc).__name__}: {exc}")
                    continue
                with self.lock:
                    self.answered += 1


def _readyz(hook: WebhookProcess) -> int:
    ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
    return httpx.get(f"{hook.url}/readyz", verify=ctx, timeout=5).status_code


def _refuses_connections(hook: WebhookProcess) -> bool:
    try:
        socket.create_connection(("127.0.0.1", _port(hook)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_drains_then_exits_without_losing_a_request() -> None:
    args = ["--backends-from", str(SAMPLES_DIR), "--shutdown-drain-seconds", str(DRAIN_SECONDS)]
    with run_webhook(extra_args=args) as hook:
        assert hook.proc is not None
        assert _readyz(hook) == 200
        clients = Clients(hook)
        threads = [threading.Thread(target=clients.run, args=(f"c{i}",)) for i in range(3)]
        for thread in threads:
            thread.start()
        wait_until(lambda: clients.answered >= 10, timeout=30, description="traffic flowing")
        in_flight = SlowRequest(hook, "in-flight-during-drain")
        outlives_listener = SlowRequest(hook, "in-flight-past-drain")

        os.kill(hook.proc.pid, signal.SIGTERM)
        signalled = time.monotonic()
        wait_until(lambda: _readyz(hook) == 503, timeout=10, description="/readyz says 503")
        # New requests on new connections are still served while draining.
        ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
        fresh = httpx.post(
            hook.url + POD_PATH, content=_pod_review("new-during-drain"), verify=ctx, timeout=10
        )
        assert fresh.status_code == 200
        assert fresh.json()["response"]["uid"] == "new-during-drain"
        assert fresh.headers.get("connection") == "close"
        assert in_flight.finish()["response"]["uid"] == "in-flight-during-drain"
        answered_at_signal = clients.answered
        wait_until(
            lambda: clients.answered > answered_at_signal + 5,
            timeout=10,
            description="keep-alive clients served while draining",
        )
        # The Service has dropped this replica by now: clients stop sending new requests.
        clients.stop.set()
        for thread in threads:
            thread.join(timeout=30)

        wait_until(lambda: _refuses_connections(hook), timeout=30, description="listener closed")
        assert time.monotonic() - signalled >= DRAIN_SECONDS - 0.5
        assert hook.proc.poll() is None, "exited with a request still in flight"
        assert outlives_listener.finish()["response"]["uid"] == "in-flight-past-drain"
        assert hook.proc.wait(timeout=30) == 0
    assert clients.failures == [], clients.failures[:5]
    assert clients.answered > 10


def test_a_second_sigterm_skips_the_drain() -> None:
    args = ["--backends-from", str(SAMPLES_DIR), "--shutdown-drain-seconds", "60"]
    with run_webhook(extra_args=args) as hook:
        assert hook.proc is not None
        os.kill(hook.proc.pid, signal.SIGTERM)
        wait_until(lambda: _readyz(hook) == 503, timeout=10, description="/readyz says 503")
        os.kill(hook.proc.pid, signal.SIGTERM)
        hook.proc.wait(timeout=20)


@dataclass
class Tally:
    """What became of every attempt of the raw clients in the SIGTERM test."""

    answered: int = 0
    refused: int = 0  # no listener: connection refused (clean)
    handshake_reset: int = 0  # TCP accepted, TLS handshake then reset or cut
    reset_before_answer: int = 0  # plain HTTP: request sent, connection reset, no answer
    unanswered: list[str] = field(default_factory=list)  # request sent, no answer
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, detail: str = "") -> None:
        with self.lock:
            if kind == "unanswered":
                self.unanswered.append(detail)
            else:
                setattr(self, kind, getattr(self, kind) + 1)


def _read_answer(sock: socket.socket) -> tuple[bytes, bool]:
    """(status line, whether the server said Connection: close); ConnectionError if the
    connection ended before a whole answer."""
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("closed before an answer")
        reply += chunk
    head, _, rest = reply.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(
        int(v.split(b":", 1)[1]) for v in lines if v.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("closed mid-answer")
        rest += chunk
    return lines[0], any(v.lower() == b"connection: close" for v in lines)


def _raw_client(port: int, ctx: ssl.SSLContext | None, tally: Tally, stop: threading.Event) -> None:
    """Pod admissions over fresh and kept-alive connections until the webhook is gone:
    every request whose bytes were sent on an accepted connection must be answered."""
    body = _pod_review("raw")
    request = (
        f"POST {POD_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    sock: socket.socket | None = None
    n = 0
    while not stop.is_set():
        if sock is None:
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            except ConnectionRefusedError:
                tally.add("refused")
                time.sleep(0.02)
                continue
            except OSError:
                tally.add("refused")
                time.sleep(0.02)
                continue
            if ctx is not None:
                try:
                    sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
                except (OSError, ssl.SSLError):
                    tally.add("handshake_reset")
                    raw.close()
                    continue
            else:
                sock = raw
        n += 1
        try:
            sock.sendall(request)
        except OSError:  # the server closed this kept-alive connection before our bytes
            sock.close()
            sock = None
            continue
        try:
            status, close = _read_answer(sock)
        except (OSError, ssl.SSLError) as exc:
            if ctx is None and isinstance(exc, ConnectionResetError) and n == 1:
                tally.add("reset_before_answer")
            else:
                tally.add("unanswered", f"{type(exc).__name__}: {exc}")
            sock.close()
            sock = None
            n = 0
            continue
        assert status.startswith(b"HTTP/1.1 200"), status
        tally.add("answered")
        if close:
            sock.close()
            sock, n = None, 0
    if sock is not None:
        sock.close()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_sigterm_under_16_clients_leaves_no_request_unanswered(
    tmp_path: Path, workers: int, tls: bool
) -> None:
    """Rule (drain): on SIGTERM under 16 clients, every request whose bytes reached an
    accepted connection is answered, including those on connections accepted during
    the drain and in its last moments; once the listener is closed, new connections
    are refused cleanly, never reset mid-handshake (the kernel's queue is accepted
    before the listener closes, new SYNs dropped: webhook_svc/http/lifecycle.py
    stop_listening). The counts are printed."""
    port = free_port()
    argv = ["--host", "127.0.0.1", "--port", str(port), "--backends-from", str(SAMPLES_DIR)]
    argv += ["--workers", str(workers), "--shutdown-drain-seconds", "2"]
    ctx = None
    if tls:
        ca = CertificateAuthority("icache-sigterm-test")
        cert, key = ca.issue_serving(["127.0.0.1"]).write(tmp_path, "tls")
        argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    else:
        argv += ["--insecure"]
    log = tmp_path / "webhook.log"
    proc = spawn_webhook(argv, log)
    tally, stop = Tally(), threading.Event()
    try:
        wait_healthy(f"{'https' if tls else 'http'}://127.0.0.1:{port}", proc, log, ctx)
        threads = [
            threading.Thread(target=_raw_client, args=(port, ctx, tally, stop)) for _ in range(16)
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: tally.answered >= 50, timeout=30, description="traffic flowing")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        stop.set()
        terminate_process_group(proc)
    print(
        f"\nworkers={workers} tls={tls}: answered {tally.answered}, refused {tally.refused}, "
        f"handshakes reset {tally.handshake_reset}, plain resets before an answer "
        f"{tally.reset_before_answer}, unanswered {len(tally.unanswered)}"
    )
    assert tally.unanswered == [], tally.unanswered[:5]
    assert tally.refused > 0, "the clients never saw the listener closed"
    assert (tally.handshake_reset, tally.reset_before_answer) == (0, 0)


def test_the_drain_filter_drops_new_syns_and_lets_queued_connections_through() -> None:
    """Rule (drain, stop_listening): once the listener refuses new connections, a new
    client's SYN goes unanswered, while a connection the kernel already queued, and its
    bytes, still reach the server and are answered. Real kernel sockets. (That a
    handshake's final ACK also passes is what the SIGTERM test above sees: no
    handshake reset under 16 clients.)"""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    queued = socket.create_connection(("127.0.0.1", port), timeout=5)
    late = socket.socket()
    late.settimeout(0.5)
    try:
        assert refuse_new_connections(listener)
        queued.sendall(b"head")
        with pytest.raises(TimeoutError):
            late.connect(("127.0.0.1", port))
        accepted, _ = listener.accept()
        with accepted:
            accepted.settimeout(5)
            assert accepted.recv(4) == b"head"
            accepted.sendall(b"answer")
            assert queued.recv(6) == b"answer"
    finally:
        for sock in (late, queued, listener):
            sock.close()
