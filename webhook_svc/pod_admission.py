"""The mutating Pod webhook (mpod.inferencecache.io): AdmissionReview in, minimal JSON patch out.

Always allowed. Every failure — an undecodable object, a failed CacheBackend list, an
adapter error, an encoding error — is a fail-open admit with a reason, because webhook
errors must never block engine admission (the MutatingWebhookConfiguration's
failurePolicy: Ignore is the second layer). Only CREATE wires: a running pod cannot pick
up new args/env without a restart anyway.

One structured log line per admission on the ``icache.webhook.pod`` logger, with the
outcome, reason, namespace, pod name/generateName and backend as extra fields.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.json_diff import verified_patch
from shared.objects import meta
from shared.pod_wiring import (
    DEFAULT_NAMESPACE,
    OUTCOME_FAIL_OPEN,
    OUTCOME_SKIPPED,
    REASON_ADAPTER_ERROR,
    REASON_INVALID_BACKEND,
    REASON_INVALID_RESULT,
    WIRING_REASONS,
    PodFacts,
    WiringResult,
    pod_facts,
    strip_decision_annotations,
    wire_facts,
)
from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_review import AdmissionRequest, allow
from webhook_svc.http.executors import Run

log = logging.getLogger("icache.webhook.pod")

REASON_NOT_CREATE: Final = "operation_not_create"
REASON_DECODE_ERROR: Final = "decode_error"
REASON_LIST_ERROR: Final = "list_error"
REASON_INTERNAL_ERROR: Final = "internal_error"
REASON_ENCODE_ERROR: Final = "encode_error"
# Every (outcome, reason) label value answer_pod can return, e.g. to pre-register metrics.
ADMISSION_REASONS: Final = (
    *WIRING_REASONS,
    REASON_NOT_CREATE,
    REASON_DECODE_ERROR,
    REASON_LIST_ERROR,
    REASON_INTERNAL_ERROR,
    REASON_ENCODE_ERROR,
)
# Reasons that mean "something is broken", logged at warning level.
_ERROR_REASONS: Final = frozenset(
    {
        REASON_DECODE_ERROR,
        REASON_LIST_ERROR,
        REASON_INTERNAL_ERROR,
        REASON_ENCODE_ERROR,
        REASON_ADAPTER_ERROR,
        REASON_INVALID_BACKEND,
        REASON_INVALID_RESULT,
    }
)


def _decode_pod(req: AdmissionRequest) -> dict[str, Any] | None:
    obj = req.obj
    if not isinstance(obj, dict):
        return None
    kind = obj.get("kind")
    if kind not in (None, "Pod"):
        return None
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict) or not isinstance(obj.get("spec"), dict):
        return None
    # Read before any wiring decision (the skip-inject opt-out, the selector): a list,
    # string or number here is no Pod the API server would have decoded.
    if any(not isinstance(metadata.get(key) or {}, dict) for key in ("labels", "annotations")):
        return None
    return obj


def _namespace(req: AdmissionRequest, pod: dict[str, Any]) -> str:
    """The request's namespace, else the pod's own, else "default" (where the API server
    and kubectl put an object that names none)."""
    return req.namespace or meta(pod).namespace or DEFAULT_NAMESPACE


@dataclass(frozen=True)
class Unwired:
    """A Pod request answered without wiring and without a patch."""

    outcome: str
    reason: str
    message: str
    logged: dict[str, Any] | None  # the object the log line takes pod names from


@dataclass(frozen=True)
class PodRequest:
    """A Pod AdmissionRequest decoded and classified once. The route's LIST decision
    (``namespace_to_list``) and the answer (``answer_pod``) both read it."""

    req: AdmissionRequest
    subject: PodFacts | Unwired

    @property
    def namespace_to_list(self) -> str | None:
        """The namespace whose CacheBackends the wiring reads, or None when the answer
        needs no list (not a CREATE, not a decodable Pod, the skip-inject opt-out)."""
        facts = self.subject
        if isinstance(facts, Unwired) or facts.skip_inject:
            return None
        return str(facts.namespace)


def classify_pod(req: AdmissionRequest) -> PodRequest:
    """Only a CREATE of a decodable Pod is wired; its facts are read here, once."""
    if req.operation != "CREATE":
        message = f"{req.operation or 'unknown'} is not wired (CREATE only)"
        return PodRequest(req, Unwired(OUTCOME_SKIPPED, REASON_NOT_CREATE, message, req.obj))
    pod = _decode_pod(req)
    if pod is None:
        # No Pod to patch: stale annotations cannot be cleared on this path.
        message = "the request object is not a decodable Pod"
        return PodRequest(req, Unwired(OUTCOME_FAIL_OPEN, REASON_DECODE_ERROR, message, None))
    return PodRequest(req, pod_facts(pod, _namespace(req, pod)))


def _log(
    req: AdmissionRequest,
    pod: dict[str, Any] | None,
    outcome: str,
    reason: str,
    message: str,
    backend: str | None,
    started: float,
) -> None:
    view = meta(pod)  # total: the log line must not fail on a hostile object
    level = logging.WARNING if reason in _ERROR_REASONS else logging.INFO
    log.log(
        level,
        "pod admission: %s",
        message,
        extra={
            "outcome": outcome,
            "reason": reason,
            "namespace": req.namespace or view.namespace,
            "pod_name": req.name or view.name,
            "pod_generate_name": view.generate_name,
            "backend": backend or "",
            "uid": req.uid,
            "dry_run": req.dry_run,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        },
    )


def _answer(
    req: AdmissionRequest, before: dict[str, Any], result: WiringResult, started: float
) -> tuple[dict[str, Any], str, str]:
    try:
        patch = verified_patch(before, result.pod)
        response = allow(req.uid, patch=patch, warnings=list(result.warnings))
    except Exception as exc:  # never block admission over an encoding problem
        _log(
            req,
            before,
            OUTCOME_FAIL_OPEN,
            REASON_ENCODE_ERROR,
            f"could not encode the patch: {exc}",
            result.backend,
            started,
        )
        return allow(req.uid), OUTCOME_FAIL_OPEN, REASON_ENCODE_ERROR
    message = "; ".join([result.message, *result.warnings])
    _log(req, before, result.outcome, result.reason, message, result.backend, started)
    return response, result.outcome, result.reason


# The CacheBackends of the namespace ``namespace_to_list`` named, or why listing them
# failed (the pod is then admitted unwired: list_error).
Backends = Sequence[dict[str, Any]] | Exception


def answer_pod(
    request: PodRequest,
    backends: Backends,
    ctx: InjectContext,
) -> tuple[dict[str, Any], str, str]:
    """(AdmissionReview response, outcome, reason); the response always allows.

    ``backends`` are the CacheBackends of the namespace ``request.namespace_to_list``
    names (ignored when it names none), or the exception listing them raised.

    The response carries the decision as ``auditAnnotations`` (``outcome``,
    ``reason``): the API server records them in its audit log under
    ``mpod.inferencecache.io/``, so why a pod was (not) wired is visible there as well
    as in our log line and metric, and a client replaying a review reads it directly.
    """
    response, outcome, reason = _decide(request, backends, ctx)
    return decision_record(response, outcome, reason), outcome, reason


def decision_record(response: dict[str, Any], outcome: str, reason: str) -> dict[str, Any]:
    """``response`` carrying the decision as ``auditAnnotations``: every Pod answer,
    the fail-open one of the route's last line of defence included, records it."""
    response["response"]["auditAnnotations"] = {"outcome": outcome, "reason": reason}
    return response


def fail_open_answer(uid: str) -> dict[str, Any]:
    """The Pod answer when the route itself failed: admitted unchanged, recorded."""
    return decision_record(allow(uid), OUTCOME_FAIL_OPEN, REASON_INTERNAL_ERROR)


# Lists one namespace's CacheBackends: the live LIST (webhook_svc/backend_source.py) or
# the files of embedded mode.
ListBackends = Callable[[str], Awaitable[Sequence[dict[str, Any]]]]


async def admit_pod(
    req: AdmissionRequest, list_backends: ListBackends, ctx: InjectContext, run: Run
) -> tuple[dict[str, Any], str, str]:
    """One Pod admission, the route's steps in one place: classify the request once,
    list the CacheBackends of the namespace it names (if any; a failure to list is
    what the answer admits unwired, list_error), then answer the same classified
    request. ``run`` runs the pure steps (in place, or on a thread for a large body).
    Returns (AdmissionReview response, outcome, reason); the response always allows."""
    pod_request: PodRequest = await run(classify_pod, req)
    namespace = pod_request.namespace_to_list
    found: Backends = []
    if namespace is not None:
        try:
            found = await list_backends(namespace)
        except Exception as exc:  # answer_pod admits the pod unwired: list_error
            found = exc
    answer: tuple[dict[str, Any], str, str] = await run(answer_pod, pod_request, found, ctx)
    return answer


def _decide(
    request: PodRequest,
    backends: Backends,
    ctx: InjectContext,
) -> tuple[dict[str, Any], str, str]:
    started = time.perf_counter()
    req, facts = request.req, request.subject
    if isinstance(facts, Unwired):
        _log(req, facts.logged, facts.outcome, facts.reason, facts.message, None, started)
        return allow(req.uid), facts.outcome, facts.reason
    pod = facts.pod
    if facts.skip_inject:
        # The explicit opt-out needs no backend: decided before (and despite) the list.
        return _answer(req, pod, wire_facts(facts, [], ctx), started)
    if isinstance(backends, Exception):  # any list failure (API, network, file) fails open
        stripped = copy.deepcopy(pod)
        strip_decision_annotations(stripped)
        message = f"listing CacheBackends failed: {type(backends).__name__}: {backends}"
        result = WiringResult(stripped, OUTCOME_FAIL_OPEN, REASON_LIST_ERROR, message)
        return _answer(req, pod, result, started)
    try:
        result = wire_facts(facts, list(backends), ctx)
    except Exception as exc:  # wiring is total; this is a last line of defence
        _log(
            req,
            pod,
            OUTCOME_FAIL_OPEN,
            REASON_INTERNAL_ERROR,
            f"wiring failed: {type(exc).__name__}: {exc}",
            None,
            started,
        )
        return allow(req.uid), OUTCOME_FAIL_OPEN, REASON_INTERNAL_ERROR
    return _answer(req, pod, result, started)
