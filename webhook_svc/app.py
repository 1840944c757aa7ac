"""The webhook app: three admission routes, health, readiness and metrics.

Each admission route is an ``async def`` on an APIRouter that reads the raw body,
awaits the I/O its answer needs (the Pod route's live CacheBackend LIST, the
validating route's SubjectAccessReviews) and then calls a pure function with plain
data (webhook_svc/cachebackend_admission.py, webhook_svc/pod_admission.py,
webhook_svc/workload_authz.py): in place, or for a body over ``INLINE_MAX_BYTES`` on a
worker thread. It answers 200 with an AdmissionReview, or 400/408/413
for a body that is not one, or 503 + Retry-After when the in-flight byte budgets stay
full (webhook_svc/http/admission_gate.py). No path returns a 500: an unexpected error on
the Pod route admits the pod unchanged, on the CacheBackend routes it becomes a
denial carrying the error, and one that escapes even that is a 503 + Retry-After,
counted in ``inferencecache_webhook_internal_errors_total``.

Connections and the request concurrency limit are the serving layer's
(webhook_svc/http/serving.py); draining is webhook_svc/http/lifecycle.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from shared.pod_wiring import OUTCOME_FAIL_OPEN
from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_review import (
    AdmissionRequest,
    BadReviewError,
    parse_review,
)
from webhook_svc.backend_source import BackendSource
from webhook_svc.cachebackend_admission import (
    internal_error_denial,
    mutate_cachebackend,
    validate_cachebackend,
)
from webhook_svc.http.admission_gate import (
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
    MIN_RESERVATION_BYTES,
    BodyReader,
    BodyTimeoutError,
    BodyTooLargeError,
    ByteBudget,
    ClientGoneError,
    OverloadedError,
    RequestLimit,
)
from webhook_svc.http.codec import BadBodyError, decode_body, encode_json
from webhook_svc.http.executors import Run, in_place, on_a_thread
from webhook_svc.http.lifecycle import is_draining, lifespan
from webhook_svc.http.serving import ServingMiddleware
from webhook_svc.metrics import WebhookMetrics
from webhook_svc.pod_admission import REASON_INTERNAL_ERROR, admit_pod, fail_open_answer
from webhook_svc.workload_authz import AccessReviewer, authorize, review_plan

log = logging.getLogger("icache.webhook")

PATH_MUTATE_CB = "/mutate-inferencecache-io-v1alpha1-cachebackend"
PATH_VALIDATE_CB = "/validate-inferencecache-io-v1alpha1-cachebackend"
PATH_MUTATE_POD = "/mutate--v1-pod"

JSON: Final = "application/json"
OVERLOADED_BODY: Final = encode_json({"error": "webhook overloaded: retry shortly"})
RETRY_AFTER: Final = {"Retry-After": "1"}

UNEXPECTED_BODY: Final = encode_json({"error": "webhook error: retry shortly"})

# Bodies larger than this are decoded, judged and encoded on a worker thread (the loop's
# default executor), the I/O still awaited on the loop. Measured: a 1 MiB Pod review
# decodes in ~11 ms, a 1 MiB body of the most object-dense JSON in ~90 ms and is judged
# in far longer, and a flood of those on the loop made /healthz miss the kubelet's 2 s
# probe timeout (tests/integration/webhook/test_webhook_overload.py). Real AdmissionReviews
# are a few KiB: on the loop, which costs less than the thread hop.
INLINE_MAX_BYTES: Final = 64 * 1024


def parse_body(raw: bytes) -> AdmissionRequest:
    """The AdmissionReview in ``raw``, or BadBodyError/BadReviewError (a 400)."""
    return parse_review(decode_body(raw))


# A judge: the parsed request in, (AdmissionReview, outcome label) out; it runs its
# pure functions through ``Run``. What it raises, and a response that cannot be
# encoded, go to the route's fallback: the Pod route's admits unchanged, the
# CacheBackend routes' deny with the error.
Judge = Callable[[AdmissionRequest, Run], Awaitable[tuple[dict[str, Any], str]]]
Fallback = Callable[[AdmissionRequest, Exception], dict[str, Any]]


@dataclass(frozen=True)
class Admission:
    """What every admission route shares: the body reader and the counters."""

    reader: BodyReader
    limit: RequestLimit
    counters: WebhookMetrics

    def bad_request(self, path: str, reason: str, detail: str, code: int = 400) -> Response:
        self.counters.bad_requests.labels(path, reason).inc()
        log.warning(
            "bad admission request", extra={"endpoint": path, "reason": reason, "detail": detail}
        )
        return answer(code, encode_json({"error": detail}))

    async def serve(
        self, request: Request, path: str, judge: Judge, fallback: Fallback
    ) -> Response:
        """Read the body (413, 408, 503), parse it (400), judge it (200). Never raises."""
        started = time.perf_counter()
        held = 0
        try:
            raw, held = await self.reader.read(request.headers, request.receive)
            if not self.limit.take():
                raise OverloadedError
            try:
                run = on_a_thread if len(raw) > INLINE_MAX_BYTES else in_place
                try:
                    req = await run(parse_body, raw)
                except BadBodyError as exc:
                    return self.bad_request(path, exc.reason, exc.detail)
                except BadReviewError as exc:
                    return self.bad_request(path, "malformed", str(exc))
                try:
                    response, outcome = await judge(req, run)
                    body = await run(encode_json, response)
                except Exception as exc:  # never a 500: the route's own safe answer
                    response, outcome = fallback(req, exc), "error"
                    body = encode_json(response)
                self.counters.admitted(path, outcome, time.perf_counter() - started)
            finally:
                self.limit.give_back()
        except BodyTooLargeError:
            detail = f"body exceeds {self.reader.max_body_bytes} bytes"
            return self.bad_request(path, "too_large", detail, 413)
        except BodyTimeoutError as exc:
            return self.bad_request(path, "timeout", str(exc), 408)
        except OverloadedError:  # the byte budget stayed full, or no request slot
            self.counters.overloaded.labels(path).inc()
            log.warning("admission overloaded: 503", extra={"endpoint": path})
            return answer(503, OVERLOADED_BODY, RETRY_AFTER)
        except ClientGoneError:
            return Response(status_code=400)  # nobody is left to read it
        except Exception:  # never a 500
            self.counters.failed(path)
            log.exception("admission request failed: 503", extra={"endpoint": path})
            return answer(503, UNEXPECTED_BODY, RETRY_AFTER)
        finally:
            self.reader.release(held)
        return answer(200, body)


def answer(code: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=code, media_type=JSON, headers=headers)


def internal_denial(req: AdmissionRequest, exc: Exception) -> dict[str, Any]:
    log.exception("cachebackend admission failed", extra={"uid": req.uid})
    return internal_error_denial(req.uid, exc, while_admitting=False)


def pod_fail_open(
    counters: WebhookMetrics, req: AdmissionRequest, _exc: Exception
) -> dict[str, Any]:
    log.exception(
        "pod admission failed; admitting unchanged",
        extra={"uid": req.uid, "outcome": OUTCOME_FAIL_OPEN, "reason": REASON_INTERNAL_ERROR},
    )
    counters.pod_wiring.labels(OUTCOME_FAIL_OPEN, REASON_INTERNAL_ERROR).inc()
    return fail_open_answer(req.uid)


def cachebackend_outcome(response: dict[str, Any]) -> str:
    answer = response["response"]
    if not answer["allowed"]:
        return "denied"
    return "patched" if "patch" in answer else "allowed"


def admission_router(
    admission: Admission,
    backends: BackendSource,
    inject_ctx: InjectContext,
    reviewer: AccessReviewer | None,
) -> APIRouter:
    """The three admission routes."""
    router = APIRouter()
    counters = admission.counters

    async def default_judge(req: AdmissionRequest, run: Run) -> tuple[dict[str, Any], str]:
        response = await run(mutate_cachebackend, req)
        return response, cachebackend_outcome(response)

    async def validate_judge(req: AdmissionRequest, run: Run) -> tuple[dict[str, Any], str]:
        response = await run(validate_cachebackend, req)
        # With an API server: the requesting user must also be allowed to create the
        # workload the backend shapes (webhook_svc/workload_authz.py).
        if reviewer is not None and response["response"]["allowed"]:
            plan = await run(review_plan, req)
            response = await authorize(req, response, reviewer, plan)
        return response, cachebackend_outcome(response)

    async def pod_judge(req: AdmissionRequest, run: Run) -> tuple[dict[str, Any], str]:
        response, outcome, reason = await admit_pod(req, backends.list, inject_ctx, run)
        counters.pod_wiring.labels(outcome, reason).inc()
        return response, outcome

    def pod_fallback(req: AdmissionRequest, exc: Exception) -> dict[str, Any]:
        return pod_fail_open(counters, req, exc)

    async def default_cachebackend_route(request: Request) -> Response:
        return await admission.serve(request, PATH_MUTATE_CB, default_judge, internal_denial)

    async def validate_cachebackend_route(request: Request) -> Response:
        return await admission.serve(request, PATH_VALIDATE_CB, validate_judge, internal_denial)

    async def wire_pod_route(request: Request) -> Response:
        return await admission.serve(request, PATH_MUTATE_POD, pod_judge, pod_fallback)

    # Request in, Response out: routes without FastAPI's parameter solving and response
    # model, which have nothing to do for raw bytes (a tenth of a small admission's CPU).
    for path, endpoint in (
        (PATH_MUTATE_CB, default_cachebackend_route),
        (PATH_VALIDATE_CB, validate_cachebackend_route),
        (PATH_MUTATE_POD, wire_pod_route),
    ):
        router.add_route(path, endpoint, methods=["POST"], include_in_schema=False)

    return router


def create_app(
    backends: BackendSource,
    inject_ctx: InjectContext,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    access_reviewer: AccessReviewer | None = None,
    registry: CollectorRegistry | None = None,
    limit_concurrency: int = DEFAULT_LIMIT_CONCURRENCY,
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
) -> FastAPI:
    """The webhook app. Its metrics live on ``registry`` (default: a new one of its
    own), which its /metrics serves; ``app.state.metrics`` holds them. Without an
    ``access_reviewer`` (embedded mode) no SubjectAccessReview is made. At most
    ``limit_concurrency`` admission requests are judged at once (more: 503 +
    Retry-After); ``on_shutdown`` runs when the server stops."""
    app = FastAPI(
        title="inference-cache webhook",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        # The webhook's metrics are Prometheus's (/metrics); no OpenTelemetry.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    counters = WebhookMetrics(registry)
    app.state.metrics = counters
    app.state.on_shutdown = list(on_shutdown)
    app.add_middleware(ServingMiddleware)
    # One body at the limit fits however the budgets are sized: bodies being judged,
    # and large bodies still arriving (webhook_svc/http/admission_gate.py).
    capacity = max(max_inflight_bytes, max_body_bytes + MIN_RESERVATION_BYTES)
    budget = ByteBudget(capacity, limit_concurrency)
    arriving = ByteBudget(capacity, limit_concurrency)
    reader = BodyReader(budget, max_body_bytes, counters.inflight_bytes, arriving=arriving)
    admission = Admission(reader, RequestLimit(limit_concurrency), counters)
    app.state.budget = budget
    app.include_router(admission_router(admission, backends, inject_ctx, access_reviewer))

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        if is_draining(request.scope):
            return Response("shutting down", status_code=503, media_type="text/plain")
        return Response("ok", media_type="text/plain")

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(
            generate_latest(counters.exposition_registry()), media_type=CONTENT_TYPE_LATEST
        )

    return app
