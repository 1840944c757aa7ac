"""The FastAPI app: three admission routes, health, readiness and metrics.

Every route answers 200 with an AdmissionReview, or 400/413 for a body that is not
one; no path returns a 500 (an unexpected error on the Pod route fails open, on the
CacheBackend routes it becomes a denial with a message).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_review import AdmissionRequest, BadReview, deny, parse_review
from webhook_svc.backend_source import BackendSource
from webhook_svc.metrics import WebhookMetrics

log = logging.getLogger("icache.webhook")

PATH_MUTATE_CB = "/mutate-inferencecache-io-v1alpha1-cachebackend"
PATH_VALIDATE_CB = "/validate-inferencecache-io-v1alpha1-cachebackend"
PATH_MUTATE_POD = "/mutate--v1-pod"


class BodyTooLarge(Exception):
    pass


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _bad_request(
    counters: WebhookMetrics, endpoint: str, reason: str, detail: str, code: int = 400
) -> JSONResponse:
    counters.bad_requests.labels(endpoint, reason).inc()
    log.warning(
        "bad admission request", extra={"endpoint": endpoint, "reason": reason, "detail": detail}
    )
    return JSONResponse({"error": detail}, status_code=code)


def _internal_denial(req: AdmissionRequest, exc: Exception) -> dict[str, Any]:
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


def create_app(
    backends: BackendSource,
    inject_ctx: InjectContext,
    max_body_bytes: int = 3 * 1024 * 1024,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The webhook app. Its metrics live on ``registry`` (default: a new one of its
    own), which its /metrics serves."""
    # Imported here so the app module loads even while a route's module is being built.
    from webhook_svc.cachebackend_admission import mutate_cachebackend, validate_cachebackend
    from webhook_svc.pod_admission import mutate_pod

    app = FastAPI(title="inference-cache webhook", docs_url=None, redoc_url=None)
    app.state.ready = True
    counters = WebhookMetrics(registry)
    app.state.metrics = counters

    def cachebackend_route(
        endpoint: str, handler: Callable[[AdmissionRequest], dict[str, Any]]
    ) -> Callable[[AdmissionRequest], tuple[dict[str, Any], str]]:
        def answer(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
            try:
                response = handler(req)
            except Exception as exc:  # never a 500: deny with the reason instead
                return _internal_denial(req, exc), "error"
            allowed = response["response"]["allowed"]
            patched = "patch" in response["response"]
            outcome = ("patched" if patched else "allowed") if allowed else "denied"
            return response, outcome

        return answer

    def pod_answer(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
        response, outcome, reason = mutate_pod(req, backends.list, inject_ctx)
        counters.pod_wiring.labels(outcome, reason).inc()
        return response, outcome

    routes: dict[str, Callable[[AdmissionRequest], tuple[dict[str, Any], str]]] = {
        PATH_MUTATE_CB: cachebackend_route(PATH_MUTATE_CB, mutate_cachebackend),
        PATH_VALIDATE_CB: cachebackend_route(PATH_VALIDATE_CB, validate_cachebackend),
        PATH_MUTATE_POD: pod_answer,
    }

    def register(path: str) -> None:
        answer = routes[path]

        @app.post(path)
        async def admission(request: Request) -> Response:
            start = time.perf_counter()
            try:
                raw = await _read_limited(request, max_body_bytes)
            except BodyTooLarge:
                return _bad_request(
                    counters, path, "too_large", f"body exceeds {max_body_bytes} bytes", 413
                )
            try:
                req = parse_review(json.loads(raw))
            except BadReview as exc:
                return _bad_request(counters, path, "malformed", str(exc))
            except (ValueError, UnicodeDecodeError) as exc:
                return _bad_request(counters, path, "malformed", f"body is not JSON: {exc}")
            if path == PATH_MUTATE_POD:
                # Live mode lists backends over the network: keep the event loop free.
                response, outcome = await run_in_threadpool(answer, req)
            else:
                response, outcome = answer(req)
            counters.admissions.labels(path, outcome).inc()
            counters.admission_latency.labels(path).observe(time.perf_counter() - start)
            return JSONResponse(response)

    for path in routes:
        register(path)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        if not app.state.ready:
            return Response("shutting down", status_code=503, media_type="text/plain")
        return Response("ok", media_type="text/plain")

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(generate_latest(counters.registry), media_type=CONTENT_TYPE_LATEST)

    return app
