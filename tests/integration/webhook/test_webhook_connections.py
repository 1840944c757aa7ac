"""The serving layer holds against idle, slow and stalled connections (webhook_svc/http/serving.py).

Each rule is driven with real sockets against a running `icache webhook` with the
shipped Deployment's sizing flags (two workers, 1 MiB in-flight body budget, 128
requests judged at once), plain and TLS, in embedded mode (the serving layer is the
same in live mode):

- a connection that has not delivered a complete request head within
  ``--request-head-timeout`` is closed (sending nothing, or trickling header bytes);
- idle connections, plain and TLS, never crowd out requests: with 500 idle TCP and
  500 idle TLS connections held, or 500 left idle after a completed request, a
  normal client gets every answer at its normal latency; idle keep-alive connections
  are closed after ``--keep-alive-timeout``;
- bodies declared large and never sent hold no budget: 16 such connections (and 16
  chunked bodies stalled after one byte) leave a normal client every answer;
- small bodies never wait behind large stalled ones: 16 connections that send all but
  one byte of a 1 MiB body and stall leave a normal client every answer;
- a body over the limit is answered 413 from its declared length, before any of it is
  read; a stalled body 408;
- the byte budget and the request limit answer the JSON 503 with Retry-After, like
  every overload answer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.delay_proxy import delay_proxy
from tests.harness.controlplane import (
    CertificateAuthority,
    ControlPlane,
    free_port,
    terminate_process_group,
)
from tests.samples import ROOT, SAMPLES_DIR
from tests.webhook_process import spawn_webhook, wait_healthy

pytestmark = pytest.mark.services

POD_PATH = "/mutate--v1-pod"
VALIDATE_PATH = "/validate-inferencecache-io-v1alpha1-cachebackend"
SHIPPED_SIZING = ["--workers=2", "--max-inflight-bytes=1048576", "--limit-concurrency=128"]
POD_REVIEW = (ROOT / "examples" / "admission" / "pod-vllm-host-only.json").read_bytes()


@dataclass
class Webhook:
    port: int
    tls: ssl.SSLContext | None  # the client's context, None for plain HTTP
    proc: Any
    log: Path

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def connect(self, handshake: bool = True, timeout: float = 30) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        if self.tls is not None and handshake:
            return self.tls.wrap_socket(sock, server_hostname="127.0.0.1")
        return sock

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.tls or False, timeout=10)


@contextlib.contextmanager
def webhook(
    tmp_path: Path, tls: bool, *args: str, kubeconfig: Path | None = None
) -> Iterator[Webhook]:
    """A running `icache webhook` with the shipped sizing (``args`` override it), in
    embedded mode, or in live mode against ``kubeconfig``."""
    port = free_port()
    argv = ["--host", "127.0.0.1", "--port", str(port)]
    if kubeconfig is None:
        argv += ["--backends-from", str(SAMPLES_DIR)]
    else:
        argv += ["--kubeconfig", str(kubeconfig)]
    client_ctx = None
    if tls:
        ca = CertificateAuthority("icache-connections-test")
        cert, key = ca.issue_serving(["127.0.0.1"]).write(tmp_path, "tls")
        argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        client_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    else:
        argv += ["--insecure"]
    log = tmp_path / "webhook.log"
    proc = spawn_webhook([*argv, *SHIPPED_SIZING, *args], log)
    hook = Webhook(port, client_ctx, proc, log)
    try:
        wait_healthy(hook.url, proc, log, client_ctx)
        yield hook
    finally:
        terminate_process_group(proc)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (EOF or reset)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if sock.recv(1024) == b"":
                return True
        except (TimeoutError, ssl.SSLWantReadError):
            continue
        except (ConnectionError, ssl.SSLError, OSError):
            return True
    return False


def assert_normal_latency(before: list[float], during: list[float]) -> None:
    """The normal client was not starved: its median latency ``during`` the attack stays
    within 5x its median ``before`` (or 50 ms), and no answer took a second."""
    normal = statistics.median(before)
    assert statistics.median(during) < max(5 * normal, 0.05), (normal, sorted(during))
    assert max(during) < 1.0, sorted(during)


def latencies(client: httpx.Client, count: int, pause: float = 0.05) -> list[float]:
    """``count`` Pod admissions in a row on one keep-alive client: each must be a
    200 with an AdmissionReview; their latencies in seconds."""
    out = []
    for _ in range(count):
        started = time.monotonic()
        reply = client.post(POD_PATH, content=POD_REVIEW)
        out.append(time.monotonic() - started)
        assert reply.status_code == 200, (reply.status_code, reply.text)
        assert reply.json()["response"]["allowed"] is True
        time.sleep(pause)
    return out


def read_answer(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer from ``sock``: status, headers (lower-cased), body."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-answer"
        body += chunk
    return int(status_line.split()[1]), headers, body


def post(sock: socket.socket, path: str, body: bytes) -> None:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)


@pytest.fixture(params=["plain", "tls"])
def tls(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "tls")


# ------------------------------------------------------------------ head bound


def test_a_connection_without_a_complete_request_head_is_closed(tmp_path: Path, tls: bool) -> None:
    """Rule --request-head-timeout: a connection that sends nothing and one that
    trickles header bytes (one every 0.3 s, for far longer than the bound) are each
    closed once the bound passes; a request that completes its head in time is
    answered."""
    bound = 2.0
    with webhook(tmp_path, tls, f"--request-head-timeout={bound}") as hook:
        silent = hook.connect()
        started = time.monotonic()
        assert closed_by_server(silent, within=bound + 5), "a silent connection stayed open"
        assert time.monotonic() - started >= bound - 0.5, "closed before the bound"

        trickle = hook.connect()
        started = time.monotonic()
        head = f"POST {POD_PATH} HTTP/1.1\r\nHost: x\r\nX-Pad: {'a' * 200}".encode()
        cut_off = False
        for byte in head:  # 70 s of bytes at this pace: only the bound can end it early
            try:
                trickle.sendall(bytes([byte]))
            except OSError:
                cut_off = True
                break
            if closed_by_server(trickle, within=0.3):
                cut_off = True
                break
            if time.monotonic() - started > bound + 8:
                break
        elapsed = time.monotonic() - started
        assert cut_off, "a trickled head kept its connection past the bound"
        assert bound - 0.5 <= elapsed < bound + 5, elapsed
        with hook.client() as client:
            latencies(client, 3)


def test_the_default_head_bound_is_ten_seconds() -> None:
    """Rule: --request-head-timeout defaults to 10 s, --keep-alive-timeout to 5 s."""
    import argparse

    from webhook_svc import webhook_cli

    parser = argparse.ArgumentParser()
    webhook_cli.add_arguments(parser)
    args = parser.parse_args([])
    assert args.request_head_timeout == 10.0
    assert args.keep_alive_timeout == 5


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(
    tmp_path: Path, tls: bool
) -> None:
    """Rule --keep-alive-timeout: after its answer, an idle connection is closed."""
    with webhook(tmp_path, tls, "--keep-alive-timeout=1") as hook:
        sock = hook.connect()
        body = POD_REVIEW
        sock.sendall(
            f"POST {POD_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        sock.settimeout(10)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first[:100]
        # the rest of the answer, if any, then EOF within the timeout (plus slack)
        assert closed_by_server(sock, within=6)


# ------------------------------------------------------------------ idle crowds


def test_idle_connections_never_crowd_out_requests(tmp_path: Path, tls: bool) -> None:
    """Rule: idle connections do not count against any request limit. 500 idle TCP
    connections (and, with TLS, 500 more with the handshake done) are held open
    while a normal client sends Pod admissions: every one is answered 200, at the
    latency it had before the idle connections arrived."""
    with webhook(tmp_path, tls) as hook, hook.client() as client:
        before = latencies(client, 20)
        held: list[socket.socket] = []
        try:
            held += [hook.connect(handshake=False) for _ in range(500)]
            if tls:
                held += [hook.connect() for _ in range(500)]
            during = latencies(client, 40)
        finally:
            for sock in held:
                sock.close()
    assert_normal_latency(before, during)


def test_idle_keep_alive_connections_never_crowd_out_requests(tmp_path: Path, tls: bool) -> None:
    """Rule: connections left open after a completed request (keep-alive idle) do not
    count against any request limit either. 500 connections each complete a Pod
    admission and stay open (the keep-alive timeout set past the test's length) while
    a normal client sends Pod admissions: every one is answered 200, at its normal
    latency."""
    with webhook(tmp_path, tls, "--keep-alive-timeout=120") as hook, hook.client() as client:
        before = latencies(client, 20)
        held: list[socket.socket] = []
        try:
            for _ in range(500):
                sock = hook.connect()
                held.append(sock)
                post(sock, POD_PATH, POD_REVIEW)
                status, headers, _ = read_answer(sock)
                assert status == 200
                assert headers.get("connection") != "close"
            during = latencies(client, 40)
            for sock in held[:10]:  # idle, not closed: each still takes a request
                post(sock, POD_PATH, POD_REVIEW)
                assert read_answer(sock)[0] == 200
        finally:
            for sock in held:
                sock.close()
    assert_normal_latency(before, during)


# ------------------------------------------------------------------ stalled bodies


def test_bodies_declared_and_never_sent_do_not_starve_small_requests(
    tmp_path: Path, tls: bool
) -> None:
    """Rule (byte budget charged as bytes arrive): 16 connections declaring a 1 MiB
    body and sending none, and 16 chunked bodies stalled after one byte, on a
    webhook with a 1 MiB in-flight budget per worker: a normal client still gets
    every answer, at once."""
    with webhook(tmp_path, tls) as hook:
        stalled: list[socket.socket] = []
        try:
            for _ in range(16):
                sock = hook.connect()
                sock.sendall(
                    f"POST {POD_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n".encode()
                )
                stalled.append(sock)
            for _ in range(16):
                sock = hook.connect()
                sock.sendall(
                    f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n1\r\n{".encode()
                )
                stalled.append(sock)
            time.sleep(0.5)  # let every stalled request reach the app
            with hook.client() as client:
                assert max(latencies(client, 10)) < 1.0
        finally:
            for sock in stalled:
                sock.close()


MIB = 1024 * 1024


@dataclass
class Stalled:
    """A connection that sent a request head and part of its body, then stopped."""

    sock: socket.socket
    sender: threading.Thread
    sent: threading.Event

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.sender.join(timeout=10)


def inflight_body_bytes(hook: Webhook) -> float:
    """The webhook's inferencecache_webhook_inflight_body_bytes (summed over workers)."""
    with hook.client() as client:
        text = client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("inferencecache_webhook_inflight_body_bytes "):
            return float(line.split()[1])
    return 0.0


def send_part_then_stall(hook: Webhook, path: str, declared: int, sent: int) -> Stalled:
    """Declare a ``declared``-byte body and send ``sent`` bytes of it (from a thread:
    a server that stops reading blocks the sender), then nothing more."""
    sock = hook.connect()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode()

    done = threading.Event()

    def push() -> None:
        with contextlib.suppress(OSError, ValueError):
            sock.sendall(head + b"x" * sent)
            done.set()

    sender = threading.Thread(target=push, daemon=True)
    sender.start()
    return Stalled(sock, sender, done)


def test_partly_sent_stalled_bodies_do_not_starve_small_requests(tmp_path: Path, tls: bool) -> None:
    """Rule (small bodies never wait behind large stalled ones): 16 connections each
    send 1 MiB - 1 byte of a declared 1 MiB body and stall, holding as much of the
    per-worker budget as a body can; a normal client sending Pod admissions still
    gets every answer at its normal latency, on a kept-alive connection and on
    fresh ones."""
    with webhook(tmp_path, tls) as hook, hook.client() as client:
        before = latencies(client, 10)
        stalled: list[Stalled] = []
        try:
            stalled = [send_part_then_stall(hook, POD_PATH, MIB, MIB - 1) for _ in range(16)]
            # A worker reads one such body whole before its budget is taken: two
            # bodies sent whole are one in each worker's budget.
            deadline = time.monotonic() + 20
            while sum(conn.sent.is_set() for conn in stalled) < 2:
                assert time.monotonic() < deadline, "the stalled bodies never arrived"
                time.sleep(0.05)
            during = latencies(client, 20)
            for _ in range(10):
                with hook.client() as fresh:
                    during += latencies(fresh, 1, pause=0)
        finally:
            for conn in stalled:
                conn.close()
    assert_normal_latency(before, during)


# ------------------------------------------------------------------ transport answers


def test_an_oversized_declared_body_is_answered_413_before_it_is_read(
    tmp_path: Path, tls: bool
) -> None:
    """Rule 413 (--max-body-bytes): a request head declaring a body over the limit is
    answered 413 from the declared Content-Length alone; not one body byte is sent."""
    with webhook(tmp_path, tls) as hook:
        sock = hook.connect()
        sock.sendall(
            f"POST {POD_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {2 * MIB}\r\n\r\n".encode()
        )
        started = time.monotonic()
        status, headers, body = read_answer(sock, timeout=5)
        assert time.monotonic() - started < 2
        sock.close()
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": f"body exceeds {MIB} bytes"}


def test_a_stalled_body_is_answered_408(tmp_path: Path, tls: bool) -> None:
    """Rule 408 (slow body): a body that stops arriving is cut once no byte came for the
    stall bound (2 s), small or large, with a JSON answer saying so."""
    with webhook(tmp_path, tls) as hook:
        for declared, sent in ((5000, 100), (MIB, MIB // 2)):
            conn = send_part_then_stall(hook, POD_PATH, declared, sent)
            # Read only once the sender is done: one TLS socket is not to be written and
            # read from two threads at once. The stall bound counts from the last byte.
            assert conn.sent.wait(10), "the webhook stopped reading the body's first part"
            started = time.monotonic()
            status, headers, body = read_answer(conn.sock, timeout=10)
            elapsed = time.monotonic() - started
            conn.close()
            assert status == 408, (declared, status, body)
            assert headers["content-type"] == "application/json"
            assert json.loads(body) == {"error": "no body bytes received for 2 s"}
            assert elapsed < 6, elapsed


def test_the_byte_budget_answers_json_503_with_retry_after(tmp_path: Path, tls: bool) -> None:
    """Rule (byte budget): a large body that cannot get arrival budget within 2 s (one
    worker, its budget held by a nearly complete 1 MiB body that keeps trickling in) is
    answered the JSON 503 with Retry-After; a small body is still answered 200 meanwhile."""
    with webhook(tmp_path, tls, "--workers=1") as hook:
        holder = send_part_then_stall(hook, POD_PATH, MIB, MIB - 64)
        stop = threading.Event()

        def trickle() -> None:  # one byte at a time, inside the stall bound
            holder.sent.wait(20)
            while not stop.wait(0.5):
                with contextlib.suppress(OSError, ValueError):
                    holder.sock.sendall(b"x")

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        try:
            deadline = time.monotonic() + 20
            while inflight_body_bytes(hook) < MIB - 64:
                assert time.monotonic() < deadline, "the holding body never arrived"
                time.sleep(0.05)
            with hook.client() as client:
                started = time.monotonic()
                reply = client.post(POD_PATH, content=b"x" * 200_000)
                waited = time.monotonic() - started
                latencies(client, 3)
        finally:
            stop.set()
            trickler.join(timeout=5)
            holder.close()
    assert reply.status_code == 503, (reply.status_code, reply.text)
    assert reply.headers["retry-after"] == "1"
    assert reply.headers["content-type"] == "application/json"
    assert json.loads(reply.content) == {"error": "webhook overloaded: retry shortly"}
    assert 1.5 < waited < 5, waited


# ------------------------------------------------------------------ request limit


@pytest.mark.integration
def test_the_request_limit_answers_json_503_with_retry_after(
    control_plane: ControlPlane, cachebackend_crd: Any, tmp_path: Path, tls: bool
) -> None:
    """Rule --limit-concurrency: past the requests one process judges at once, the
    answer is the JSON 503 with Retry-After (not uvicorn's text/plain 503), plain
    and TLS. Judging is held open by a slow API server (each CacheBackend LIST
    answered 1.5 s late)."""
    upstream = ("127.0.0.1", int(control_plane.server_url.rsplit(":", 1)[1]))
    with delay_proxy(upstream) as proxy:
        kubeconfig = control_plane.write_kubeconfig(
            tmp_path / "kubeconfig", server=f"https://127.0.0.1:{proxy.port}"
        )
        with webhook(
            tmp_path, tls, "--workers=1", "--limit-concurrency=2", kubeconfig=kubeconfig
        ) as hook:
            proxy.delay = 1.5
            replies: list[httpx.Response] = []

            def admit() -> None:
                with hook.client() as client:
                    replies.append(client.post(POD_PATH, content=POD_REVIEW))

            threads = [threading.Thread(target=admit) for _ in range(4)]
            for thread in threads:
                thread.start()
                time.sleep(0.1)
            for thread in threads:
                thread.join(timeout=15)
    codes = sorted(r.status_code for r in replies)
    assert codes == [200, 200, 503, 503], codes
    for reply in replies:
        if reply.status_code == 503:
            assert reply.headers["retry-after"] == "1"
            assert reply.headers["content-type"] == "application/json"
            assert json.loads(reply.content) == {"error": "webhook overloaded: retry shortly"}
