"""The webhook app: three admission routes, health, readiness and metrics.

Every admission route answers 200 with an AdmissionReview, or 400/408/413 for a body
that is not one, or 503 + Retry-After when the in-flight byte budget stays full
(webhook_svc/admission_gate.py); no path returns a 500 (an unexpected error on the Pod
route fails open, on the CacheBackend routes it becomes a denial with a message).
The admission POSTs are served by webhook_svc/admission_asgi.py in front of FastAPI
(``WebhookApp``); health, readiness and metrics by FastAPI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.types import Receive, Scope, Send

from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_asgi import AdmissionDoor
from webhook_svc.admission_gate import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
    ByteBudget,
)
from webhook_svc.admission_review import AdmissionRequest
from webhook_svc.admission_route import (
    Answer,
    Route,
    internal_denial,
    is_create,
    never_blocks,
    pod_fail_open,
)
from webhook_svc.backend_source import AsyncBackendSource, BackendSource
from webhook_svc.lifecycle import CloseWhenDraining, lifecycle_of, lifespan
from webhook_svc.metrics import WebhookMetrics
from webhook_svc.workload_authz import (
    AccessReviewer,
    AsyncAccessReviewer,
    authorizing,
    authorizing_async,
    review_possible,
)

PATH_MUTATE_CB = "/mutate-inferencecache-io-v1alpha1-cachebackend"
PATH_VALIDATE_CB = "/validate-inferencecache-io-v1alpha1-cachebackend"
PATH_MUTATE_POD = "/mutate--v1-pod"


class WebhookApp(FastAPI):
    """FastAPI, with the admission POSTs answered by an ``AdmissionDoor`` first."""

    door: AdmissionDoor | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        door = self.door
        if door is not None and scope["type"] == "http" and scope["method"] == "POST":
            route = door.routes.get(scope["path"])
            if route is not None:
                await door(route, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(
    backends: BackendSource,
    inject_ctx: InjectContext,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    access_reviewer: AccessReviewer | None = None,
    registry: CollectorRegistry | None = None,
    live_backends: AsyncBackendSource | None = None,
    async_access_reviewer: AsyncAccessReviewer | None = None,
) -> WebhookApp:
    """The webhook app. Its metrics live on ``registry`` (default: a new one of its
    own), which its /metrics serves; ``app.state.metrics`` holds them. With
    ``live_backends`` the Pod route lists through it, on the event loop, instead of
    ``backends`` on a thread; with ``async_access_reviewer`` the validating route's
    SubjectAccessReviews are awaited on the loop (``access_reviewer`` then serves
    bodies too large to judge on the loop)."""
    if async_access_reviewer is not None and access_reviewer is None:
        # Bodies too large to judge on the loop are reviewed by the threaded reviewer:
        # without one they would go unreviewed.
        raise ValueError("async_access_reviewer needs an access_reviewer as well")
    # Imported here so the app module loads even while a route's module is being built.
    from webhook_svc.cachebackend_admission import mutate_cachebackend, validate_cachebackend
    from webhook_svc.pod_admission import mutate_pod, namespace_to_list

    app = WebhookApp(
        title="inference-cache webhook", docs_url=None, redoc_url=None, lifespan=lifespan
    )
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
                return internal_denial(counters, req, exc), "error"
            allowed = response["response"]["allowed"]
            patched = "patch" in response["response"]
            outcome = ("patched" if patched else "allowed") if allowed else "denied"
            return response, outcome

        return answer

    def pod_answer_with(list_backends: Callable[[str], list[dict[str, Any]]]) -> Answer:
        def pod_answer(req: AdmissionRequest) -> tuple[dict[str, Any], str]:
            response, outcome, reason = mutate_pod(req, list_backends, inject_ctx)
            counters.pod_wiring.labels(outcome, reason).inc()
            return response, outcome

        return pod_answer

    pod_answer = pod_answer_with(backends.list)

    async def pod_prefetch(req: AdmissionRequest, _large: bool) -> Answer:
        """The live LIST on the event loop, then wiring with what it returned (or
        with its failure, which mutate_pod turns into list_error, failing open)."""
        namespace = namespace_to_list(req)
        if namespace is None or live_backends is None:
            return pod_answer  # mutate_pod will not list
        try:
            items = await live_backends.list(namespace)
        except Exception as exc:
            failure = exc

            def failed(_namespace: str) -> list[dict[str, Any]]:
                raise failure

            return pod_answer_with(failed)
        return pod_answer_with(lambda _namespace: items)

    validate_answer = cachebackend_route(authorizing(validate_cachebackend, access_reviewer))
    authorize = (
        authorizing_async(validate_cachebackend, async_access_reviewer)
        if async_access_reviewer is not None
        else None
    )

    async def validate_prefetch(req: AdmissionRequest, large: bool) -> Answer | None:
        """Validation, then the SubjectAccessReviews awaited on the event loop, for a
        request that may need them; None (the threaded path) otherwise or when large."""
        if large or authorize is None or not review_possible(req):
            return None
        try:
            response = await authorize(req)
        except Exception as exc:
            failure = exc

            def failed(_req: AdmissionRequest) -> dict[str, Any]:
                raise failure

            return cachebackend_route(failed)
        return cachebackend_route(lambda _req: response)

    routes = [
        Route(PATH_MUTATE_CB, cachebackend_route(mutate_cachebackend), internal_denial, counters),
        # With an API server: the requesting user must also be allowed to create the
        # workload the backend shapes (webhook_svc/workload_authz.py).
        Route(
            PATH_VALIDATE_CB,
            validate_answer,
            internal_denial,
            counters,
            may_block=review_possible if access_reviewer is not None else never_blocks,
            prefetch=validate_prefetch if async_access_reviewer is not None else None,
        ),
        # Wiring a CREATE lists CacheBackends: on the event loop when the source is
        # asynchronous (the live API), else (files, a threaded client) off it.
        Route(
            PATH_MUTATE_POD,
            pod_answer,
            pod_fail_open,
            counters,
            may_block=never_blocks if live_backends is not None else is_create,
            prefetch=pod_prefetch if live_backends is not None else None,
        ),
    ]
    budget = ByteBudget(max(max_inflight_bytes, max_body_bytes))
    app.door = AdmissionDoor({r.path: r for r in routes}, counters, max_body_bytes, budget)

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
