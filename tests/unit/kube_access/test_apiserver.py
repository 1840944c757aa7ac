"""The webhook's API client (kubeio/async_client.py, ``kubernetes.aio``) against a
scripted API server.

``ApiServer`` sends requests with the configuration kubeio.access builds (server,
TLS files, proxy, bearer token and its refresh) over pooled keep-alive connections: a
request on a pooled connection the server had closed is sent once more, a partial
answer is an error and never retried, ``Connection: close`` and cancellation close the
connection, a 429/503 with a Retry-After that fits the budget is waited out, and no
answer within the budget is ``TimeoutError``. The CacheBackend source and the
SubjectAccessReview reviewer use it. Every server here is a real asyncio server on
127.0.0.1 that the test scripts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import ssl
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import pytest
import uvloop
from kubernetes import client

from icache_install import certs
from kubeio import async_client as apiserver
from kubeio.retries import RETRY_POLICY
from tests.fakes import AsyncScriptedServer, Request, Respond, api_for
from webhook_svc.backend_source import ApiBackendSource, ListFailedError
from webhook_svc.workload_authz import ApiAccessReviewer, ReviewCache, ReviewError

Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Both event loops: the webhook reads on uvloop, asyncio's is the fallback."""
    return asyncio.run if request.param == "asyncio" else uvloop.run


def answer(status: int, body: bytes, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def ok(body: bytes = b'{"items": []}') -> Respond:
    async def respond(_request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(200, body))
        return True

    return respond


async def never_answer(_request: Request, _writer: asyncio.StreamWriter) -> bool:
    return True  # reads on: sees the client's EOF when it gives up


def test_a_get_returns_status_and_body_and_sends_the_clients_auth(run: Run) -> None:
    """Rule: one GET with the client's bearer token (update_params_for_auth), Host
    and Accept: application/json; the answer is (status, body)."""

    async def scenario() -> None:
        async with AsyncScriptedServer(ok(b'{"kind": "List"}')) as server:
            api = server.api()
            assert await api.get("/api/v1/x", 5) == (200, b'{"kind": "List"}')
            await api.close()
        (request,) = server.requests
        assert request.line == "GET /api/v1/x HTTP/1.1"
        assert request.header("authorization") == ["Bearer t0k"]
        assert request.header("host") == [f"127.0.0.1:{server.port}"]
        assert request.header("accept") == ["application/json"]

    run(scenario())


def test_a_rotated_token_is_sent_on_the_next_request(run: Run) -> None:
    """Rule: auth is read from the configuration on every request, not captured once:
    a token the refresh hook replaced is the one sent next."""

    async def scenario() -> None:
        async with AsyncScriptedServer(ok()) as server:
            configuration = server.configuration()
            token = ["t0k"]

            def refresh(conf: client.Configuration) -> None:  # the mounted file, re-read
                conf.api_key = {"authorization": token[0]}

            cast(Any, configuration).refresh_api_key_hook = refresh
            api = api_for(configuration)
            await api.get("/a", 5)
            token[0] = "rotated"
            await api.get("/b", 5)
            await api.close()
        assert [r.header("authorization") for r in server.requests] == [
            ["Bearer t0k"],
            ["Bearer rotated"],
        ]

    run(scenario())


def test_the_request_carries_one_user_agent(run: Run) -> None:
    """Rule (HTTP): a sender does not repeat a header field that is not a list."""

    async def scenario() -> None:
        async with AsyncScriptedServer(ok()) as server:
            api = server.api()
            await api.get("/a", 5)
            await api.close()
        (request,) = server.requests
        assert len(request.header("user-agent")) == 1, request.header("user-agent")

    run(scenario())


def test_sequential_gets_reuse_one_connection(run: Run) -> None:
    """Rule: keep-alive pooling; a second GET goes over the first GET's connection."""

    async def scenario() -> None:
        async with AsyncScriptedServer(ok()) as server:
            api = server.api()
            for _ in range(3):
                assert (await api.get("/a", 5))[0] == 200
            await api.close()
        assert server.connections == 1
        assert [r.connection for r in server.requests] == [0, 0, 0]

    run(scenario())


@pytest.mark.parametrize("when", ["after answering", "on the next request"])
def test_an_idle_connection_the_server_closed_is_replaced_transparently(
    run: Run, when: str
) -> None:
    """Rule: a request that fails on a reused connection before any of its answer
    arrived is retried once on a new connection. "on the next request": the server
    reads the request and closes without a byte of answer (the race with its idle
    timeout), so the retry path itself is taken."""

    async def scenario() -> None:
        async def respond(request: Request, writer: asyncio.StreamWriter) -> bool:
            if when == "on the next request" and len(server.requests) == 2:
                return False  # read, then close unanswered
            writer.write(answer(200, b'{"n": %d}' % len(server.requests)))
            return when != "after answering"

        async with AsyncScriptedServer(respond) as server:
            api = server.api()
            assert await api.get("/a", 5) == (200, b'{"n": 1}')
            assert await api.get("/a", 5) == (200, b'{"n": %d}' % len(server.requests))
            await api.close()
        if when == "on the next request":  # sent on the stale connection, then again
            assert [r.connection for r in server.requests] == [0, 0, 1]
        else:
            assert [r.connection for r in server.requests] == [0, 1]

    run(scenario())


def test_a_partial_answer_then_close_raises_and_is_not_retried(run: Run) -> None:
    """Rule: once some of the answer arrived, a dropped connection is an error,
    never a retry: the request is not sent twice."""

    async def scenario() -> None:
        async def respond(request: Request, writer: asyncio.StreamWriter) -> bool:
            if len(server.requests) == 1:
                writer.write(answer(200, b"{}"))
                return True
            writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"items": [')
            return False

        async with AsyncScriptedServer(respond) as server:
            api = server.api()
            await api.get("/a", 5)  # the connection is now pooled: a retry would be allowed
            with pytest.raises(aiohttp.ClientError):
                await api.get("/a", 5)
            await api.close()
        assert len(server.requests) == 2
        assert server.connections == 1

    run(scenario())


def test_a_chunked_answer_is_reassembled(run: Run) -> None:
    """Rule: Transfer-Encoding: chunked answers (the API server's for large LISTs)."""
    body = b'{"items": [' + b",".join(b'{"i": %d}' % i for i in range(500)) + b"]}"

    async def scenario() -> None:
        async def respond(_request: Request, writer: asyncio.StreamWriter) -> bool:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for start in range(0, len(body), 1000):
                chunk = body[start : start + 1000]
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            return True

        async with AsyncScriptedServer(respond) as server:
            api = server.api()
            assert await api.get("/a", 5) == (200, body)
            assert await api.get("/a", 5) == (200, body)  # and the connection is reusable
            await api.close()
        assert server.connections == 1

    run(scenario())


def test_connection_close_answer_is_not_reused(run: Run) -> None:
    """Rule: an answer with ``Connection: close`` ends that connection on our side; the
    server here keeps it open, so reusing it would be seen."""

    async def scenario() -> None:
        async def respond(_request: Request, writer: asyncio.StreamWriter) -> bool:
            writer.write(answer(200, b"{}", "Connection: close"))
            return True

        async with AsyncScriptedServer(respond) as server:
            api = server.api()
            await api.get("/a", 5)
            await api.get("/a", 5)
            await asyncio.wait_for(server.client_closed[0].wait(), 5)
            await api.close()
        assert [r.connection for r in server.requests] == [0, 1]

    run(scenario())


def test_a_cancelled_get_closes_its_connection(run: Run) -> None:
    """Rule: the caller's deadline ends the GET promptly, closes the connection it was
    using (the server sees EOF) and never returns it to the pool."""

    async def scenario() -> None:
        async def respond(request: Request, writer: asyncio.StreamWriter) -> bool:
            if request.connection > 0:
                writer.write(answer(200, b"{}"))
            return True

        async with AsyncScriptedServer(respond) as server:
            api = server.api()
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await api.get("/a", 0.2)
            assert time.monotonic() - started < 2
            await asyncio.wait_for(server.client_closed[0].wait(), 5)
            assert await api.get("/a", 5) == (200, b"{}")
            await api.close()
        assert [r.connection for r in server.requests] == [0, 1]

    run(scenario())


def test_backend_source_lists_the_namespaces_cachebackends(run: Run) -> None:
    """Rule: ``list(ns)`` GETs the namespaced CacheBackend collection, returns items."""
    items = [{"metadata": {"name": "b1"}}, {"metadata": {"name": "b2"}}]

    async def scenario() -> None:
        async with AsyncScriptedServer(ok(orjson.dumps({"items": items}))) as server:
            source = ApiBackendSource(server.api(), 5)
            assert await source.list("team-a") == items
        (request,) = server.requests
        path = "/apis/inferencecache.io/v1alpha1/namespaces/team-a/cachebackends"
        assert request.line == f"GET {path} HTTP/1.1"

    run(scenario())


def test_backend_source_raises_list_failed_on_a_non_200(run: Run) -> None:
    """Rule: any status but 200 is ``ListFailedError`` naming the status."""

    async def scenario() -> None:
        async def forbidden(_request: Request, writer: asyncio.StreamWriter) -> bool:
            writer.write(answer(403, b'{"kind": "Status", "reason": "Forbidden"}'))
            return True

        async with AsyncScriptedServer(forbidden) as server:
            source = ApiBackendSource(server.api(), 5)
            with pytest.raises(ListFailedError) as failed:
                await source.list("team-a")
        assert str(failed.value).startswith("HTTP 403")

    run(scenario())


def test_backend_source_gives_up_at_its_deadline(run: Run) -> None:
    """Rule: no answer within ``seconds`` is ``TimeoutError`` with the Pod webhook's
    wording (the list_error reason shows it)."""

    async def scenario() -> None:
        async with AsyncScriptedServer(never_answer) as server:
            source = ApiBackendSource(server.api(), 0.3)
            started = time.monotonic()
            with pytest.raises(TimeoutError) as late:
                await source.list("team-a")
            assert time.monotonic() - started < 2
        assert str(late.value) == "no answer from the API server within 0.3 s"

    run(scenario())


def test_an_http_proxy_in_the_configuration_is_used(run: Run) -> None:
    """Rule: a kubeconfig's proxy-url is honoured (requests go through the proxy, in
    absolute form), as the synchronous client honours it; nothing is taken from the
    environment."""

    async def scenario() -> None:
        async with AsyncScriptedServer(ok()) as proxy:
            configuration = client.Configuration()
            configuration.host = "http://kubernetes.invalid:6443"
            configuration.proxy = f"http://127.0.0.1:{proxy.port}"
            api = api_for(configuration)
            assert await api.get("/api/v1/x", 5) == (200, b'{"items": []}')
            await api.close()
        (request,) = proxy.requests
        assert request.line == "GET http://kubernetes.invalid:6443/api/v1/x HTTP/1.1"

    run(scenario())


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA; serving certificates signed by it for 127.0.0.1 ("ip") and for
    kubernetes.default.svc only ("named"); and an unrelated CA ("other.ca")."""
    now = dt.datetime.now(dt.UTC)
    ca = certs.new_ca(now)
    directory = tmp_path_factory.mktemp("pki")
    (directory / "ca").write_bytes(ca.cert_pem)
    (directory / "other.ca").write_bytes(certs.new_ca(now).cert_pem)
    for name, host in (("ip", "127.0.0.1"), ("named", "kubernetes.default.svc")):
        serving = certs.issue_serving(ca, [host], now)
        (directory / f"{name}.crt").write_bytes(serving.cert_pem)
        (directory / f"{name}.key").write_bytes(serving.key_pem)
    return directory


def serving_context(pki: Path, name: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / f"{name}.crt", pki / f"{name}.key")
    return context


@pytest.mark.parametrize(
    ("serving", "settings"),
    [
        ("ip", {"ssl_ca_cert": "ca"}),
        ("named", {"ssl_ca_cert": "ca", "tls_server_name": "kubernetes.default.svc"}),
        ("ip", {"ssl_ca_cert": "other.ca", "verify_ssl": False}),
    ],
    ids=["ca", "tls_server_name", "verify_ssl-off"],
)
def test_https_as_the_client_configuration_says(
    run: Run, pki: Path, serving: str, settings: dict[str, Any]
) -> None:
    """Rule: TLS as the kubernetes client would do it: ``ssl_ca_cert`` is the trust
    anchor, ``tls_server_name`` the name verified, ``verify_ssl=False`` trusts anything."""
    if "ssl_ca_cert" in settings:
        settings = {**settings, "ssl_ca_cert": str(pki / settings["ssl_ca_cert"])}

    async def scenario() -> None:
        async with AsyncScriptedServer(ok(b"{}"), tls=serving_context(pki, serving)) as server:
            api = server.api("https", **settings)
            assert await api.get("/a", 5) == (200, b"{}")
            assert await api.get("/a", 5) == (200, b"{}")
            await api.close()
        assert server.connections == 1

    run(scenario())


@pytest.mark.parametrize(
    ("serving", "ca"), [("ip", "other.ca"), ("named", "ca")], ids=["another-ca", "wrong-name"]
)
def test_https_refuses_a_certificate_it_cannot_verify(
    run: Run, pki: Path, serving: str, ca: str
) -> None:
    """Rule: a server certificate not signed by the configured CA, or not naming the
    host dialled, fails verification before any request is sent."""

    async def scenario() -> None:
        async with AsyncScriptedServer(ok(b"{}"), tls=serving_context(pki, serving)) as server:
            api = server.api("https", ssl_ca_cert=str(pki / ca))
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await api.get("/a", 5)
        assert server.requests == []

    run(scenario())


def test_a_rotated_ca_file_is_used_from_the_next_request(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: like urllib3 (which reads the files per connection), the client trusts a
    rotated CA file from its next request on; without the reload the second GET
    fails verification."""
    monkeypatch.setattr(apiserver, "TLS_CHECK_SECONDS", 0.0)
    now = dt.datetime.now(dt.UTC)
    old_ca, new_ca = certs.new_ca(now), certs.new_ca(now)
    old_cert, new_cert = (certs.issue_serving(ca, ["127.0.0.1"], now) for ca in (old_ca, new_ca))
    for name, pair in (("old", old_cert), ("new", new_cert)):
        (tmp_path / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(pair.key_pem)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(old_ca.cert_pem)
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(tmp_path / "old.crt", tmp_path / "old.key")

    async def scenario() -> None:
        async with AsyncScriptedServer(ok(b"{}"), tls=serving) as server:
            api = server.api("https", ssl_ca_cert=str(ca_file))
            assert await api.get("/a", 5) == (200, b"{}")
            # The API server's certificate and the mounted CA rotate together.
            serving.load_cert_chain(tmp_path / "new.crt", tmp_path / "new.key")
            ca_file.write_bytes(new_ca.cert_pem)
            os.utime(ca_file, ns=(time.time_ns(), time.time_ns() + 10**9))
            assert await api.get("/a", 5) == (200, b"{}")
            await api.close()
        assert server.connections == 2

    run(scenario())


# ------------------------------------------------------------ SubjectAccessReviews


def answering(status: int, body: bytes) -> Respond:
    async def respond(_request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(status, body))
        return True

    return respond


REVIEW = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {}}


def test_an_async_review_posts_the_review_and_reads_its_status(run: Run) -> None:
    """Rule: the review is POSTed as JSON to the subjectaccessreviews path with the
    client's auth, and the answer's status read."""
    granted = b'{"status": {"allowed": true, "reason": "RBAC: allowed"}}'

    async def scenario() -> None:
        async with AsyncScriptedServer(answering(201, granted)) as server:
            reviewer = ApiAccessReviewer(server.api())
            outcome = await reviewer.review(REVIEW)
        assert outcome == {"status": {"allowed": True, "denied": False, "reason": "RBAC: allowed"}}
        (request,) = server.requests
        assert request.line == "POST /apis/authorization.k8s.io/v1/subjectaccessreviews HTTP/1.1"
        assert request.header("authorization") == ["Bearer t0k"]
        assert request.header("content-type") == ["application/json"]
        assert orjson.loads(request.body) == REVIEW

    run(scenario())


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (403, b"{}", "API server said 403 Forbidden"),
        (599, b"{}", "API server said 599"),
        (201, b"[]", "SubjectAccessReview came back without a status"),
        (201, b"{", "unreadable SubjectAccessReview answer"),
    ],
)
def test_an_async_review_that_cannot_be_read_is_a_review_error(
    run: Run, status: int, body: bytes, message: str
) -> None:
    """Rule: an answer that is not a readable SubjectAccessReview is a ReviewError (the
    webhook then denies with 503, failing closed)."""

    async def scenario() -> None:
        async with AsyncScriptedServer(answering(status, body)) as server:
            with pytest.raises(ReviewError, match=message):
                await ApiAccessReviewer(server.api()).review(REVIEW)

    run(scenario())


def test_an_async_review_has_a_hard_budget(run: Run) -> None:
    """Rule: each review gets a wall-clock budget; past it, ReviewError naming it."""

    async def scenario() -> None:
        async with AsyncScriptedServer(never_answer) as server:
            started = time.monotonic()
            with pytest.raises(ReviewError, match=r"^no answer from the API server within 0\.2 s$"):
                await ApiAccessReviewer(server.api(), budget=0.2).review(REVIEW)
            assert time.monotonic() - started < 2

    run(scenario())


# ------------------------------------------------------------------ Retry-After


def busy_then_ok(busy: int, status: int = 429, retry_after: str | None = "0") -> Respond:
    """``busy`` answers ``status`` (with Retry-After when given), then 200."""
    left = [busy]

    async def respond(_request: Request, writer: asyncio.StreamWriter) -> bool:
        if left[0] > 0:
            left[0] -= 1
            extra = [f"Retry-After: {retry_after}"] if retry_after is not None else []
            writer.write(answer(status, b"{}", *extra))
        else:
            writer.write(answer(200, b'{"items": []}'))
        return True

    return respond


@pytest.mark.parametrize(
    ("status", "retry_after", "budget", "expected", "requests"),
    [
        (429, "0", 5.0, 200, 2),  # waited out and sent again
        (503, "0", 5.0, 200, 2),
        (429, "30", 5.0, 429, 1),  # does not fit the deadline: answered at once
        (429, None, 5.0, 429, 1),  # no Retry-After: not retried
        (500, "0", 5.0, 500, 1),  # not a status to wait out
        (429, "1", 0.5, 429, 1),  # longer than the budget left
    ],
    ids=["429", "503", "too-long", "no-header", "500", "past-budget"],
)
def test_a_retry_after_that_fits_the_deadline_is_waited_out(
    run: Run,
    status: int,
    retry_after: str | None,
    budget: float,
    expected: int,
    requests: int,
) -> None:
    """Rule (client-go's behaviour): a 429/503 with a Retry-After that fits before the
    caller's deadline is waited out and the request sent again; anything else is the
    answer."""

    async def scenario() -> None:
        async with AsyncScriptedServer(busy_then_ok(1, status, retry_after)) as server:
            api = server.api()
            got, _ = await api.get("/a", budget)
            await api.close()
        assert got == expected
        assert len(server.requests) == requests

    run(scenario())


def test_the_async_client_sends_at_most_the_shared_policys_sends(run: Run) -> None:
    """Rule (kubeio.retries.RETRY_POLICY, the synchronous client's too): after
    ``sends`` sends the last answer stands."""

    async def scenario() -> None:
        async with AsyncScriptedServer(busy_then_ok(100)) as server:
            api = server.api()
            assert (await api.get("/a", 5.0))[0] == 429
            await api.close()
        assert len(server.requests) == RETRY_POLICY.sends

    run(scenario())


def test_the_backend_source_waits_out_a_restarting_api_server(run: Run) -> None:
    """Rule: the Pod route's LIST rides out "storage is (re)initializing" (429,
    Retry-After) within its budget instead of failing open."""

    async def scenario() -> None:
        async with AsyncScriptedServer(busy_then_ok(2)) as server:
            source = ApiBackendSource(server.api(), 2.0)
            assert await source.list("ns") == []
        assert len(server.requests) == 3

    run(scenario())


def _review_for(user: str) -> dict[str, Any]:
    return {**REVIEW, "spec": {"user": user, "resourceAttributes": {"verb": "create"}}}


def test_review_answers_are_kept_for_their_ttl_allowed_and_denied_apart() -> None:
    """Rule (--access-review-allowed-ttl/-denied-ttl): an allowed answer is reused for
    the allowed TTL, a denied one for the denied TTL (0: never), per exact review."""
    cache = ReviewCache(allowed_ttl=10, denied_ttl=0)
    allowed = {"status": {"allowed": True, "denied": False, "reason": ""}}
    denied = {"status": {"allowed": False, "denied": False, "reason": ""}}
    alice, bob = cache.key(_review_for("alice")), cache.key(_review_for("bob"))
    cache.put(alice, allowed, now=100)
    cache.put(bob, denied, now=100)
    assert cache.get(alice, now=109.9) == allowed
    assert cache.get(alice, now=110) is None  # expired
    assert cache.get(bob, now=100) is None  # denied answers not kept with a 0 TTL
    small = ReviewCache(allowed_ttl=10, denied_ttl=5, max_entries=1)
    small.put(alice, allowed, now=0)
    small.put(bob, denied, now=0)
    assert small.get(alice, now=1) is None  # the oldest made room
    assert small.get(bob, now=4) == denied
    assert small.get(bob, now=5) is None


def test_the_reviewer_asks_once_per_review_while_its_answer_is_kept(run: Run) -> None:
    """Rule: with a cache, the same review within the TTL is answered without asking;
    another user's review, and every review after a failure, is asked."""
    granted = b'{"status": {"allowed": true}}'
    calls = [0]

    async def respond(_request: Request, writer: asyncio.StreamWriter) -> bool:
        calls[0] += 1
        if calls[0] == 2:
            writer.write(answer(500, b"{}"))
        else:
            writer.write(answer(201, granted))
        return True

    async def scenario() -> None:
        async with AsyncScriptedServer(respond) as server:
            reviewer = ApiAccessReviewer(server.api(), cache=ReviewCache(60, 0))
            for _ in range(3):
                assert (await reviewer.review(_review_for("alice")))["status"]["allowed"]
            with pytest.raises(ReviewError):
                await reviewer.review(_review_for("bob"))  # the second answer: 500
            assert (await reviewer.review(_review_for("bob")))["status"]["allowed"]
        assert len(server.requests) == 3

    run(scenario())
