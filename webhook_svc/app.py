"""The FastAPI app: three admission routes, health, readiness and metrics.

Every route answers 200 with an AdmissionReview, or 400/408/413 for a body that is
not one, or 503 + Retry-After when the in-flight byte budget stays full
(webhook_svc/admission_gate.py); no path returns a 500 (an unexpected error on the Pod
route fails open, on the CacheBackend routes it becomes a denial with a message).
Per request: reserve budget, read the body, then ``Route.admit`` on the thread pool
(decode with webhook_svc/codec.py, answer, encode).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from shared.pod_wiring import OUTCOME_FAIL_OPEN
from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_gate import (
    BODY_READ_SECONDS,
    BUDGET_WAIT_SECONDS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
    MIN_RESERVATION_BYTES,
    ByteBudget,
    OverloadedError,
)
from webhook_svc.admission_review import AdmissionRequest, BadReviewError, allow, deny, parse_review
from webhook_svc.backend_source import BackendSource
from webhook_svc.codec import BadBodyError, decode_body, encode_json
from webhook_svc.lifecycle import CloseWhenDraining, lifecycle_of, lifespan
from webhook_svc.metrics import WebhookMetrics
from webhook_svc.pod_admission import REASON_INTERNAL_ERROR
from webhook_svc.workload_authz import AccessReviewer, authorizing

log = logging.getLogger("icache.webhook")

PATH_MUTATE_CB = "/mutate-inferencecache-io-v1alpha1-cachebackend"
PATH_VALIDATE_CB = "/validate-inferencecache-io-v1alpha1-cachebackend"
PATH_MUTATE_POD = "/mutate--v1-pod"


class BodyTooLargeError(Exception):
    pass


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        chunks.append(chunk)
    return b"".join(chunks)


def _bad_request(
    counters: WebhookMetrics, endpoint: str, reason: str, detail: str, code: int = 400
) -> tuple[int, bytes]:
    counters.bad_requests.labels(endpoint, reason).inc()
    log.warning(
        "bad admission request", extra={"endpoint": endpoint, "reason": reason, "detail": detail}
    )
    return code, encode_json({"error": detail})


def _internal_denial(
    _counters: WebhookMetrics, req: AdmissionRequest, exc: Exception
) -> dict[str, Any]:
    log.exception("cachebackend admission failed", extra={"uid": req.uid})
    return deny(
        req.uid,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"inference-cache webhook internal error: {type(exc).__name__}: {exc}",
            "reason": "InternalError",
            "code": 500,
        },
    )


def _pod_fail_open(
    counters: WebhookMetrics, req: AdmissionRequest, _exc: Exception
) -> dict[str, Any]:
    log.exception(
        "pod admission failed; admitting unchanged",
        extra={"uid": req.uid, "outcome": OUTCOME_FAIL_OPEN, "reason": REASON_INTERNAL_ERROR},
    )
    counters.pod_wiring.labels(OUTCOME_FAIL_OPEN, REASON_INTERNAL_ERROR).inc()
    response = allow(req.uid)
    # The same decision record as every other Pod answer (see pod_admission.mutate_pod).
    response["response"]["auditAnnotations"] = {
        "outcome": OUTCOME_FAIL_OPEN,
        "reason": REASON_INTERNAL_ERROR,
    }
    return response


@dataclass(frozen=True)
class Route:
    """One admission path: its answer, and the answer when anything at all goes wrong
    (the Pod route admits, the CacheBackend routes deny with the error)."""

    path: str
    answer: Callable[[AdmissionRequest], tuple[dict[str, Any], str]]
    fallback: Callable[[WebhookMetrics, AdmissionRequest, Exception], dict[str, Any]]
    counters: WebhookMetrics

    def admit(self, raw: bytes, started: float) -> tuple[int, bytes]:
        """(HTTP status, body) for one request body: 200 with an AdmissionReview, or a
        400 naming what is wrong with the body. Never raises."""
        try:
            req = parse_review(decode_body(raw))
        except BadBodyError as exc:
            return _bad_request(self.counters, self.path, exc.reason, exc.detail)
        except BadReviewError as exc:
            return _bad_request(self.counters, self.path, "malformed", str(exc))
        try:
            response, outcome = self.answer(req)
            body = encode_json(response)
        except Exception as exc:  # never a 500: the route's own safe answer instead
            response, outcome = self.fallback(self.counters, req, exc), "error"
            body = encode_json(response)
        self.counters.admissions.labels(self.path, outcome).inc()
        self.counters.admission_latency.labels(self.path).observe(time.perf_counter() - started)
        return 200, body


_Endpoint = Callable[[Request], Awaitable[Response]]


def _plain_post(app: FastAPI, path: str) -> Callable[[_Endpoint], _Endpoint]:
    """A POST route without FastAPI's dependency and response-model machinery: the
    admission routes read raw bytes and return bytes, and that machinery cost a sixth
    of a request (issue 12 profile)."""

    def register(endpoint: _Endpoint) -> _Endpoint:
        app.add_route(path, endpoint, methods=["POST"], include_in_schema=False)
        return endpoint

    return register


def create_app(
    backends: BackendSource,
    inject_ctx: InjectContext,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    access_reviewer: AccessReviewer | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The webhook app. Its metrics live on ``registry`` (default: a new one of its
    own), which its /metrics serves; ``app.state.metrics`` holds them."""
    # Imported here so the app module loads even while a route's module is being built.
    from webhook_svc.cachebackend_admission import mutate_cachebackend, validate_cachebackend
    from webhook_svc.pod_admission import mutate_pod

    app = FastAPI(title="inference-cache webhook", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_middleware(CloseWhenDraining)
    counters = WebhookMetrics(registry)
    app.state.metrics = counters

    def cachebackend_route(
        handler: Callable[[AdmissionRequest], dict[str, Any]],
    ) -> Callable[[AdmissionRequest], tuple[dict[str, Any], str]]:
        def answer(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
            try:
                response = handler(req)
            except Exception as exc:  # never a 500: deny with the reason instead
                return _internal_denial(counters, req, exc), "error"
            allowed = response["response"]["allowed"]
            patched = "patch" in response["response"]
            outcome = ("patched" if patched else "allowed") if allowed else "denied"
            return response, outcome

        return answer

    def pod_answer(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
        response, outcome, reason = mutate_pod(req, backends.list, inject_ctx)
        counters.pod_wiring.labels(outcome, reason).inc()
        return response, outcome

    routes = [
        Route(PATH_MUTATE_CB, cachebackend_route(mutate_cachebackend), _internal_denial, counters),
        # With an API server: the requesting user must also be allowed to create the
        # workload the backend shapes (webhook_svc/workload_authz.py).
        Route(
            PATH_VALIDATE_CB,
            cachebackend_route(authorizing(validate_cachebackend, access_reviewer)),
            _internal_denial,
            counters,
        ),
        Route(PATH_MUTATE_POD, pod_answer, _pod_fail_open, counters),
    ]

    budget = ByteBudget(max(max_inflight_bytes, max_body_bytes))

    async def answer(route: Route, request: Request, started: float) -> tuple[int, bytes]:
        declared = request.headers.get("content-length", "")
        size = int(declared) if declared.isdigit() else max_body_bytes
        if size > max_body_bytes:
            return _bad_request(
                counters, route.path, "too_large", f"body exceeds {max_body_bytes} bytes", 413
            )
        async with budget.reserve(max(size, MIN_RESERVATION_BYTES), BUDGET_WAIT_SECONDS):
            counters.inflight_bytes.set(budget.used)
            try:
                async with asyncio.timeout(BODY_READ_SECONDS):
                    raw = await _read_limited(request, max_body_bytes)
            except BodyTooLargeError:
                return _bad_request(
                    counters, route.path, "too_large", f"body exceeds {max_body_bytes} bytes", 413
                )
            except TimeoutError:
                return _bad_request(
                    counters,
                    route.path,
                    "timeout",
                    f"body not received within {BODY_READ_SECONDS:g} s",
                    408,
                )
            # Decoding and judging hold the GIL in long stretches: never on the event loop,
            # which keeps answering /healthz and reading other requests meanwhile.
            return await run_in_threadpool(route.admit, raw, started)

    def register(route: Route) -> None:
        @_plain_post(app, route.path)
        async def admission(request: Request) -> Response:
            started = time.perf_counter()
            try:
                status, body = await answer(route, request, started)
            except OverloadedError:
                counters.overloaded.labels(route.path).inc()
                log.warning("admission budget full: 503", extra={"endpoint": route.path})
                return Response(
                    encode_json({"error": "webhook overloaded: retry shortly"}),
                    status_code=503,
                    headers={"Retry-After": "1"},
                    media_type="application/json",
                )
            finally:
                counters.inflight_bytes.set(budget.used)
            return Response(body, status_code=status, media_type="application/json")

    for route in routes:
        register(route)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    def readyz(request: Request) -> Response:
        lifecycle = lifecycle_of(request.scope)
        if lifecycle is not None and lifecycle.draining:
            return Response("shutting down", status_code=503, media_type="text/plain")
        return Response("ok", media_type="text/plain")

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(
            generate_latest(counters.exposition_registry()), media_type=CONTENT_TYPE_LATEST
        )

    return app
