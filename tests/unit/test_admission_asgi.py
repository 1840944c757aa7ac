"""Issue 12: the admission routes' own ASGI path (webhook_svc/admission_asgi.py).

``AdmissionDoor`` keeps every guarantee of the old FastAPI routes: 413 before reading
an oversized declared body and while reading one, 408 for a body that never completes,
503 + Retry-After when the byte budget stays full, no answer to a client that left,
``Connection: close`` while draining, JSON with a correct Content-Length always. Small
bodies are decoded and judged on the event loop, large ones (and routes that may block)
on a worker thread; a route's ``prefetch`` runs on the loop first. ``WebhookApp`` sends
admission POSTs to the door and everything else to FastAPI; the Pod route with a live
(async) backend source lists once per CREATE that needs it, and fails open on errors.
Everything here drives the ASGI callables directly.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from starlette.types import Message

from shared.runtime_adapters.base import InjectContext
from tests.samples import ROOT, SAMPLES_DIR
from webhook_svc import admission_asgi
from webhook_svc.admission_asgi import INLINE_MAX_BYTES, AdmissionDoor
from webhook_svc.admission_gate import ByteBudget
from webhook_svc.admission_review import AdmissionRequest, allow
from webhook_svc.admission_route import Answer, Prefetch, Route, internal_denial
from webhook_svc.app import (
    PATH_MUTATE_CB,
    PATH_MUTATE_POD,
    PATH_VALIDATE_CB,
    WebhookApp,
    create_app,
)
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource
from webhook_svc.lifecycle import LIFECYCLE_KEY, Lifecycle
from webhook_svc.metrics import WebhookMetrics

PATH = "/judge"
MAX_BODY = 1024 * 1024
EXAMPLES = ROOT / "examples" / "admission"


def review_body(uid: str = "u-1", pad: int = 0) -> bytes:
    """An AdmissionReview; ``pad`` bytes of annotation make it as large as wanted."""
    obj = {"metadata": {"name": "x", "annotations": {"pad": "p" * pad}}, "spec": {}}
    request = {"uid": uid, "operation": "CREATE", "namespace": "ns", "object": obj}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "request": request})


def http_scope(
    path: str = PATH,
    method: str = "POST",
    headers: Sequence[tuple[bytes, bytes]] = (),
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A complete HTTP scope, as uvicorn builds it (FastAPI needs every key)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": list(headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8443),
        "state": state if state is not None else {},
    }


def sized(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]


@dataclass
class Exchange:
    """One request through an ASGI callable: what it received and what it sent."""

    chunks: list[bytes]  # the body, in http.request messages
    then: str = "wait"  # after the body: "wait" forever, or "disconnect"
    complete: bool = True  # False: the last chunk still says more_body (never finishes)
    received: int = 0
    sent: list[Message] = field(default_factory=list)

    async def receive(self) -> Message:
        if self.received < len(self.chunks):
            self.received += 1
            more = self.received < len(self.chunks) or not self.complete
            return {
                "type": "http.request",
                "body": self.chunks[self.received - 1],
                "more_body": more,
            }
        if self.then == "disconnect":
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # a client that sends nothing more
        raise AssertionError("unreachable")

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def answer(self) -> tuple[int, dict[bytes, bytes], bytes]:
        """(status, headers, body), checking the framing every answer must have."""
        start, body = self.sent
        assert start["type"] == "http.response.start"
        assert body["type"] == "http.response.body"
        assert not body.get("more_body", False)
        headers = dict(start["headers"])
        assert len(headers) == len(start["headers"])  # no header twice
        assert headers[b"content-type"] == b"application/json"
        assert headers[b"content-length"] == b"%d" % len(body["body"])
        orjson.loads(body["body"])  # JSON, whatever the status
        return start["status"], headers, body["body"]


def run_door(
    door: AdmissionDoor, route: Route, exchange: Exchange, scope: dict[str, Any] | None = None
) -> Exchange:
    async def call() -> None:
        await door(
            route,
            scope or http_scope(headers=sized(b"".join(exchange.chunks))),
            exchange.receive,
            exchange.send,
        )

    asyncio.run(call())
    return exchange


@dataclass(frozen=True)
class RecordingRoute(Route):
    """A real Route that also records on which thread it decoded."""

    seen: list[tuple[str, threading.Thread]] = field(default_factory=list)

    def parse(self, raw: bytes) -> AdmissionRequest | tuple[int, bytes]:
        self.seen.append(("parse", threading.current_thread()))
        return super().parse(raw)


def recording_route(may_block: bool = False, prefetch: Prefetch | None = None) -> RecordingRoute:
    seen: list[tuple[str, threading.Thread]] = []

    def answer(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
        seen.append(("judge", threading.current_thread()))
        return allow(req.uid), "allowed"

    return RecordingRoute(
        PATH,
        answer,
        internal_denial,
        WebhookMetrics(),
        may_block=lambda _req: may_block,
        prefetch=prefetch,
        seen=seen,
    )


def door_for(route: Route, budget: ByteBudget | None = None) -> AdmissionDoor:
    return AdmissionDoor(
        {route.path: route}, route.counters, MAX_BODY, budget or ByteBudget(2 * MAX_BODY)
    )


def sample(route: Route, name: str, labels: dict[str, str]) -> float | None:
    return route.counters.registry.get_sample_value(name, labels)


# --------------------------------------------------------------------------- where judging runs


@pytest.mark.parametrize(
    ("pad", "may_block", "parse_on_loop", "judge_on_loop"),
    [
        (0, False, True, True),
        (INLINE_MAX_BYTES, False, False, False),
        (0, True, True, False),
    ],
    ids=["small", "large", "may-block"],
)
def test_where_decoding_and_judging_run(
    pad: int, may_block: bool, parse_on_loop: bool, judge_on_loop: bool
) -> None:
    """Rule: a body up to INLINE_MAX_BYTES is decoded on the loop and judged there unless
    the route may block; a larger one is decoded and judged on a worker thread."""
    route = recording_route(may_block=may_block)
    body = review_body(pad=pad)
    assert (len(body) > INLINE_MAX_BYTES) == (pad > 0)
    status, _, answer = run_door(door_for(route), route, Exchange([body])).answer()
    assert status == 200
    assert orjson.loads(answer)["response"] == {"uid": "u-1", "allowed": True}
    main = threading.main_thread()  # asyncio.run's loop runs here
    (parse, parsed_on), (judge, judged_on) = route.seen
    assert (parse, judge) == ("parse", "judge")
    assert (parsed_on is main) == parse_on_loop
    assert (judged_on is main) == judge_on_loop
    assert parsed_on is main or parsed_on.name.startswith("admission")


@pytest.mark.parametrize("pad", [0, INLINE_MAX_BYTES], ids=["small", "large"])
def test_prefetch_runs_on_the_loop_and_its_answer_is_used(pad: int) -> None:
    """Rule: ``prefetch`` runs on the event loop before judging, and judging uses the
    answer it returned instead of the route's own."""
    order: list[str] = []

    def prefetched(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
        order.append("judge")
        return allow(req.uid, message="from prefetch"), "allowed"

    async def prefetch(req: AdmissionRequest, large: bool) -> Answer:
        assert threading.current_thread() is threading.main_thread()
        await asyncio.sleep(0)  # it may await (the live LIST)
        order.append(f"prefetch {req.uid} large={large}")
        return prefetched

    route = recording_route(prefetch=prefetch)
    status, _, answer = run_door(door_for(route), route, Exchange([review_body(pad=pad)])).answer()
    assert status == 200
    assert orjson.loads(answer)["response"]["status"]["message"] == "from prefetch"
    assert order == [f"prefetch u-1 large={pad > 0}", "judge"]
    assert [what for what, _ in route.seen] == ["parse"]  # the route's own answer unused


@pytest.mark.parametrize(
    ("pad", "blocks", "judged_on_loop"),
    [(0, False, True), (0, True, False), (INLINE_MAX_BYTES, False, False)],
    ids=["small", "small-may-block", "large"],
)
def test_a_prefetch_that_declines_leaves_the_routes_own_answer(
    pad: int, blocks: bool, judged_on_loop: bool
) -> None:
    """Rule: a prefetch returning None hands the request to the route's own answer,
    judged where it would have been without a prefetch (off the loop when it may block
    or the body is large)."""

    async def decline(_req: AdmissionRequest, _large: bool) -> Answer | None:
        return None

    route = recording_route(prefetch=decline, may_block=blocks)
    status, _, _ = run_door(door_for(route), route, Exchange([review_body(pad=pad)])).answer()
    assert status == 200
    (_, _), (judge, judged_on) = route.seen
    assert judge == "judge"
    assert (judged_on is threading.main_thread()) == judged_on_loop


def test_anything_unexpected_is_a_503_with_retry_after_never_a_500() -> None:
    """Rule: no answer is a 500; an unexpected error is 503 + Retry-After."""

    async def prefetch(_req: AdmissionRequest, _large: bool) -> Answer:
        raise RuntimeError("a prefetch that broke its contract")

    route = recording_route(prefetch=prefetch)
    status, headers, _ = run_door(door_for(route), route, Exchange([review_body()])).answer()
    assert (status, headers[b"retry-after"]) == (503, b"1")


# --------------------------------------------------------------------------- body guards


def test_a_declared_length_over_the_limit_is_413_before_reading() -> None:
    """Rule: Content-Length over max_body_bytes: 413 without reading the body."""
    route = recording_route()
    exchange = Exchange([b"x" * 10])
    scope = http_scope(headers=[(b"content-length", b"%d" % (MAX_BODY + 1))])
    status, _, answer = run_door(door_for(route), route, exchange, scope).answer()
    assert status == 413
    assert exchange.received == 0
    assert b"exceeds" in answer
    too_large = {"endpoint": PATH, "reason": "too_large"}
    assert sample(route, "inferencecache_webhook_bad_requests_total", too_large) == 1.0


def test_a_body_that_grows_over_the_limit_while_read_is_413() -> None:
    """Rule: without a (truthful) Content-Length, reading stops at the limit: 413."""
    route = recording_route()
    chunk = b"x" * (256 * 1024)
    exchange = Exchange([chunk] * 8)  # 2 MiB, no Content-Length
    status, _, _ = run_door(door_for(route), route, exchange, http_scope()).answer()
    assert status == 413
    assert exchange.received == 5  # stopped as soon as the limit was passed
    assert route.seen == []


def test_a_body_that_never_completes_is_408(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule: the body must arrive within BODY_READ_SECONDS, else 408."""
    monkeypatch.setattr(admission_asgi, "BODY_READ_SECONDS", 0.2)
    route = recording_route()
    body = review_body()
    exchange = Exchange([body[:10]], complete=False)
    started = time.monotonic()
    status, _, answer = run_door(
        door_for(route), route, exchange, http_scope(headers=sized(body))
    ).answer()
    assert status == 408
    assert 0.2 <= time.monotonic() - started < 5
    assert b"0.2 s" in answer
    assert (
        sample(
            route,
            "inferencecache_webhook_bad_requests_total",
            {"endpoint": PATH, "reason": "timeout"},
        )
        == 1.0
    )


def test_a_full_budget_is_503_with_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule: budget that stays full for BUDGET_WAIT_SECONDS: 503 + Retry-After, the
    body unread; once budget frees up the same request is answered."""
    monkeypatch.setattr(admission_asgi, "BUDGET_WAIT_SECONDS", 0.1)
    route = recording_route()
    budget = ByteBudget(8192)
    door = door_for(route, budget)
    body = review_body()

    async def scenario() -> tuple[Exchange, Exchange]:
        held = await budget.acquire(budget.capacity, 1)
        refused = Exchange([body])
        await door(route, http_scope(headers=sized(body)), refused.receive, refused.send)
        budget.release(held)
        served = Exchange([body])
        await door(route, http_scope(headers=sized(body)), served.receive, served.send)
        return refused, served

    refused, served = asyncio.run(scenario())
    status, headers, _ = refused.answer()
    assert (status, headers[b"retry-after"]) == (503, b"1")
    assert refused.received == 0
    assert sample(route, "inferencecache_webhook_overloaded_total", {"endpoint": PATH}) == 1.0
    assert served.answer()[0] == 200
    assert budget.used == 0


def test_a_client_that_left_gets_no_answer_and_holds_no_budget() -> None:
    """Rule: http.disconnect while the body is read: nothing is sent, budget returned."""
    route = recording_route()
    budget = ByteBudget(2 * MAX_BODY)
    body = review_body()
    exchange = Exchange([body[:10]], complete=False, then="disconnect")
    run_door(door_for(route, budget), route, exchange, http_scope(headers=sized(body)))
    assert exchange.sent == []
    assert budget.used == 0
    assert route.seen == []


@pytest.mark.parametrize("draining", [False, True])
def test_connection_close_while_draining(draining: bool) -> None:
    """Rule: while the lifecycle drains, every answer says ``Connection: close``."""
    lifecycle = Lifecycle()
    lifecycle.draining = draining
    route = recording_route()
    body = review_body()
    scope = http_scope(headers=sized(body), state={LIFECYCLE_KEY: lifecycle})
    _, headers, _ = run_door(door_for(route), route, Exchange([body]), scope).answer()
    assert (headers.get(b"connection") == b"close") == draining


@pytest.mark.parametrize(
    ("chunks", "status"),
    [([review_body()], 200), ([b"{not json"], 400), ([b"x" * (MAX_BODY + 1)], 413)],
    ids=["200", "400", "413"],
)
def test_every_answer_is_json_with_its_content_length(chunks: list[bytes], status: int) -> None:
    """Rule: every answer, whatever its status, is application/json with a
    Content-Length equal to its body (checked by ``Exchange.answer``)."""
    route = recording_route()
    assert run_door(door_for(route), route, Exchange(chunks)).answer()[0] == status


# --------------------------------------------------------------------------- the whole app


def run_app(app: WebhookApp, scope: dict[str, Any], body: bytes = b"") -> Exchange:
    exchange = Exchange([body])
    asyncio.run(app(scope, exchange.receive, exchange.send))
    return exchange


def test_the_app_sends_admission_posts_to_the_door_and_the_rest_to_fastapi() -> None:
    """Rule: only POSTs to an admission path take the door; a GET there, and every other
    path, is FastAPI's (never a 200 admission answer, never a 500)."""
    app = create_app(FileBackendSource(SAMPLES_DIR, load_backends), InjectContext())
    body = review_body()
    posted = run_app(app, http_scope(PATH_MUTATE_CB, headers=sized(body)), body)
    status, headers, answer = posted.answer()
    assert status == 200
    assert list(headers) == [b"content-type", b"content-length"]  # the door's, exactly
    assert orjson.loads(answer)["response"]["uid"] == "u-1"

    got = run_app(app, http_scope(PATH_MUTATE_CB, method="GET"))
    assert got.sent[0]["status"] not in (200, 500)
    assert "detail" in orjson.loads(got.sent[1]["body"])  # FastAPI's error, not the door's
    health = run_app(app, http_scope("/healthz", method="GET"))
    assert (health.sent[0]["status"], health.sent[1]["body"]) == (200, b"ok")
    posted_health = run_app(app, http_scope("/healthz"))
    assert posted_health.sent[0]["status"] == 405


class LiveBackends:
    """An async backend source (the live API): counts its LISTs, or fails them."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        self.calls.append(namespace)
        if self.fail:
            raise ConnectionError("the API server closed the connection")
        return [
            b
            for b in load_backends(SAMPLES_DIR)
            if b["metadata"].get("namespace", "default") == namespace
        ]


class NoThreadedList:
    """The threaded source: with a live source it must never be used."""

    def list(self, namespace: str) -> list[dict[str, Any]]:
        raise AssertionError(f"threaded list of {namespace}")


def pod_review(name: str, operation: str = "CREATE") -> bytes:
    review = json.loads((EXAMPLES / name).read_text())
    review["request"]["operation"] = operation
    return orjson.dumps(review)


@pytest.mark.parametrize(
    ("example", "operation", "lists", "decision"),
    [
        ("pod-vllm-host-only.json", "CREATE", ["default"], ("injected", "injected")),
        ("pod-vllm-host-only.json", "UPDATE", [], ("skipped", "operation_not_create")),
        ("pod-skip-inject.json", "CREATE", [], ("skipped", "skip_inject_annotation")),
    ],
    ids=["create", "update", "skip-inject"],
)
def test_the_pod_route_lists_live_once_per_create_that_needs_it(
    example: str, operation: str, lists: list[str], decision: tuple[str, str]
) -> None:
    """Rule: with ``live_backends`` the Pod route lists once on the loop for a CREATE
    that will be wired, with the items it returned, and not at all when the answer needs
    no list (not a CREATE, the skip-inject opt-out)."""
    live = LiveBackends()
    app = create_app(NoThreadedList(), InjectContext(), live_backends=live)
    body = pod_review(example, operation)
    status, _, answer = run_app(
        app, http_scope(PATH_MUTATE_POD, headers=sized(body)), body
    ).answer()
    assert status == 200
    response = orjson.loads(answer)["response"]
    assert response["allowed"] is True
    assert (
        response["auditAnnotations"]["outcome"],
        response["auditAnnotations"]["reason"],
    ) == decision
    assert live.calls == lists


def test_the_pod_route_fails_open_when_the_live_list_fails() -> None:
    """Rule: a failed live LIST admits the pod unchanged, reason list_error."""
    live = LiveBackends(fail=True)
    app = create_app(NoThreadedList(), InjectContext(), live_backends=live)
    body = pod_review("pod-vllm-host-only.json")
    status, _, answer = run_app(
        app, http_scope(PATH_MUTATE_POD, headers=sized(body)), body
    ).answer()
    response = orjson.loads(answer)["response"]
    assert (status, response["allowed"]) == (200, True)
    assert response["auditAnnotations"] == {"outcome": "fail_open", "reason": "list_error"}
    assert "patch" not in response
    assert live.calls == ["default"]


class Granting:
    """A blocking reviewer that allows everything and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body["spec"]["resourceAttributes"]["resource"])
        return {"status": {"allowed": True}}


class AwaitedGranting:
    """The same, awaited on the event loop."""

    def __init__(self) -> None:
        self.granting = Granting()
        self.asked = self.granting.asked

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        assert threading.current_thread() is threading.main_thread()
        await asyncio.sleep(0)
        return self.granting.review(body)


@pytest.mark.parametrize(("pad", "awaited"), [(0, True), (INLINE_MAX_BYTES, False)])
def test_the_validating_route_awaits_reviews_unless_the_body_is_large(
    pad: int, awaited: bool
) -> None:
    """Rule: with an event-loop reviewer, a writer outside system:masters is reviewed on
    the loop; a body too large to judge on the loop goes to the threaded reviewer."""
    review = json.loads((EXAMPLES / "create-vllm-lmcacheserver-managed.json").read_text())
    review["request"]["userInfo"] = {"username": "alice", "groups": ["system:authenticated"]}
    review["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * pad}
    body = json.dumps(review).encode()
    threaded, on_loop = Granting(), AwaitedGranting()
    app = create_app(
        NoThreadedList(), InjectContext(), access_reviewer=threaded, async_access_reviewer=on_loop
    )
    status, _, answer = run_app(
        app, http_scope(PATH_VALIDATE_CB, headers=sized(body)), body
    ).answer()
    assert status == 200
    assert orjson.loads(answer)["response"]["allowed"] is True
    assert (on_loop.asked, threaded.asked) == (
        (["deployments"], []) if awaited else ([], ["deployments"])
    )


def test_a_cancellation_from_elsewhere_is_not_a_slow_body() -> None:
    """read_body_within turns only its own deadline into TimeoutError (the 408); a
    cancellation from outside (shutdown, client gone) stays a cancellation."""

    async def scenario() -> None:
        started = asyncio.Event()

        async def receive() -> Message:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        reading = asyncio.ensure_future(admission_asgi.read_body_within(receive, 10, 30.0))
        await started.wait()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading

        with pytest.raises(TimeoutError):
            await admission_asgi.read_body_within(receive, 10, 0.05)

    asyncio.run(scenario())


def test_an_event_loop_reviewer_alone_is_refused() -> None:
    """Rule: bodies too large for the loop are reviewed by the threaded reviewer, so an
    app with only the event-loop one (large bodies unreviewed) is not built."""
    with pytest.raises(ValueError, match="needs an access_reviewer"):
        create_app(NoThreadedList(), InjectContext(), async_access_reviewer=AwaitedGranting())
