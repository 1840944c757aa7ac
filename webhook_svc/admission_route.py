"""One admission path: its answer, and its answer when anything at all goes wrong.

``Route.admit`` turns a request body into (HTTP status, response body) and never
raises: 200 with an AdmissionReview, or a 400 naming what is wrong with the body. It
runs in two steps so the server can choose where each runs (webhook_svc/admission_asgi.py):
``parse`` (decode with webhook_svc/codec.py) and ``judge`` (answer, encode, count).
``may_block`` says whether judging a parsed request may wait on the network (the Pod
route's CacheBackend LIST through a threaded client, the validating route's
SubjectAccessReview); ``prefetch``, when set, does that waiting on the event loop first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared.pod_wiring import OUTCOME_FAIL_OPEN
from webhook_svc.admission_review import AdmissionRequest, BadReviewError, allow, deny, parse_review
from webhook_svc.codec import BadBodyError, decode_body, encode_json
from webhook_svc.metrics import WebhookMetrics
from webhook_svc.pod_admission import REASON_INTERNAL_ERROR

log = logging.getLogger("icache.webhook")

Answer = Callable[[AdmissionRequest], tuple[dict[str, Any], str]]
# Waits on the event loop for what judging the request needs (the Pod route's live
# LIST, the validating route's SubjectAccessReviews) and returns the answer to judge it
# with, or None for the route's own ``answer`` (judged off the loop if ``may_block``).
# Told whether the body is large (then it should not spend CPU on the loop). Never
# raises: a failed read is part of the answer.
Prefetch = Callable[[AdmissionRequest, bool], Awaitable[Answer | None]]
Fallback = Callable[[WebhookMetrics, AdmissionRequest, Exception], dict[str, Any]]


def bad_request(
    counters: WebhookMetrics, endpoint: str, reason: str, detail: str, code: int = 400
) -> tuple[int, bytes]:
    counters.bad_requests.labels(endpoint, reason).inc()
    log.warning(
        "bad admission request", extra={"endpoint": endpoint, "reason": reason, "detail": detail}
    )
    return code, encode_json({"error": detail})


def internal_denial(
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


def pod_fail_open(
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


def never_blocks(_req: AdmissionRequest) -> bool:
    return False


def is_create(req: AdmissionRequest) -> bool:
    return req.operation == "CREATE"


@dataclass(frozen=True)
class Route:
    """One admission path (the Pod route admits on any error, the CacheBackend routes
    deny with the error)."""

    path: str
    answer: Answer
    fallback: Fallback
    counters: WebhookMetrics
    may_block: Callable[[AdmissionRequest], bool] = never_blocks
    prefetch: Prefetch | None = None

    def parse(self, raw: bytes) -> AdmissionRequest | tuple[int, bytes]:
        """The request, or the 400 answer for a body that is not an AdmissionReview."""
        try:
            return parse_review(decode_body(raw))
        except BadBodyError as exc:
            return bad_request(self.counters, self.path, exc.reason, exc.detail)
        except BadReviewError as exc:
            return bad_request(self.counters, self.path, "malformed", str(exc))

    def judge(
        self, req: AdmissionRequest, started: float, answer: Answer | None = None
    ) -> tuple[int, bytes]:
        """200 and the AdmissionReview answering ``req`` (with ``answer``, default the
        route's own). Never raises."""
        try:
            response, outcome = (answer or self.answer)(req)
            body = encode_json(response)
        except Exception as exc:  # never a 500: the route's own safe answer instead
            response, outcome = self.fallback(self.counters, req, exc), "error"
            body = encode_json(response)
        self.counters.admitted(self.path, outcome, time.perf_counter() - started)
        return 200, body

    def admit(self, raw: bytes, started: float) -> tuple[int, bytes]:
        """``parse`` then ``judge``. Never raises."""
        parsed = self.parse(raw)
        if isinstance(parsed, tuple):
            return parsed
        return self.judge(parsed, started)
