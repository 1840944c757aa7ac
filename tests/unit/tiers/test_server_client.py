"""The /probe client against a real HTTP server on loopback (docs/server-contract.md,
"POST /probe"): transport errors and HTTP 5xx are "could not reach" (outcome error,
FunctionalProbeOK=Unknown/ProbeError); any other answer is judged as a result, and a
result that is not a pass fails closed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reconciler.steps.server_client import ServerClient
from tests.fakes import QuietHandler


class _Answer:
    status = 200
    body = b""


def _handler(answer: type[_Answer]) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server names
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[ServerClient, type[_Answer]]]:
    class Answer(_Answer):
        pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Answer))
    # shutdown() waits for serve_forever to look at its flag: every 50 ms, not the
    # default 500 ms each test would otherwise spend in teardown.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    client = ServerClient(f"http://127.0.0.1:{httpd.server_address[1]}", token_path="/nonexistent")
    try:
        yield client, Answer
    finally:
        client.close()
        httpd.shutdown()
        httpd.server_close()


def _probe(client: ServerClient) -> tuple[str, str]:
    obs = client.probe("ns/cb", "m", "vllm", "LMCache")
    return obs.outcome, obs.message


@pytest.mark.parametrize("status", [500, 502, 503])
def test_http_5xx_is_could_not_reach(
    server: tuple[ServerClient, type[_Answer]], status: int
) -> None:
    client, answer = server
    answer.status, answer.body = status, b"{}"
    assert _probe(client) == ("error", f"POST /probe: HTTP {status}")


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_http_4xx_is_an_answer_that_fails_closed(
    server: tuple[ServerClient, type[_Answer]], status: int
) -> None:
    """A 4xx is not "could not reach": its empty result fails the gate (False), with
    the status in the message (a wrong token must not leave the gate Unknown)."""
    client, answer = server
    answer.status, answer.body = status, json.dumps({"error": "forbidden"}).encode()
    outcome, message = _probe(client)
    assert outcome == "failed"
    assert message == f"POST /probe: HTTP {status}: empty probe result"


def test_a_passing_result_passes(server: tuple[ServerClient, type[_Answer]]) -> None:
    client, answer = server
    answer.body = json.dumps({"ingest": "ok", "routing": "ok", "t2": "skipped"}).encode()
    assert _probe(client) == ("ok", "")


def test_transport_error_is_could_not_reach() -> None:
    client = ServerClient("http://127.0.0.1:9", token_path="/nonexistent")
    try:
        outcome, message = _probe(client)
    finally:
        client.close()
    assert outcome == "error"
    assert message.startswith("POST /probe: ")
