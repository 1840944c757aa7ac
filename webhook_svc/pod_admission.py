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
from collections.abc import Callable
from typing import Any, Final

from shared.pod_wiring import (
    OUTCOME_FAIL_OPEN,
    OUTCOME_SKIPPED,
    REASON_ADAPTER_ERROR,
    REASON_INVALID_BACKEND,
    REASON_INVALID_RESULT,
    WIRING_REASONS,
    WiringResult,
    strip_decision_annotations,
    wire_pod,
)
from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_review import AdmissionRequest, allow, json_patch

log = logging.getLogger("icache.webhook.pod")

REASON_NOT_CREATE: Final = "operation_not_create"
REASON_DECODE_ERROR: Final = "decode_error"
REASON_LIST_ERROR: Final = "list_error"
REASON_INTERNAL_ERROR: Final = "internal_error"
REASON_ENCODE_ERROR: Final = "encode_error"
# Every (outcome, reason) label value mutate_pod can return, e.g. to pre-register metrics.
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
    if not isinstance(obj.get("metadata", {}), dict) or not isinstance(obj.get("spec"), dict):
        return None
    return obj


def _log(
    req: AdmissionRequest,
    pod: dict[str, Any] | None,
    outcome: str,
    reason: str,
    message: str,
    backend: str | None,
    started: float,
) -> None:
    metadata = (pod or {}).get("metadata") or {}
    level = logging.WARNING if reason in _ERROR_REASONS else logging.INFO
    log.log(
        level,
        "pod admission: %s",
        message,
        extra={
            "outcome": outcome,
            "reason": reason,
            "namespace": req.namespace or metadata.get("namespace") or "",
            "pod_name": req.name or metadata.get("name") or "",
            "pod_generate_name": metadata.get("generateName") or "",
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
        patch = json_patch(before, result.pod)
        response = allow(req.uid, patch=patch)
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
    _log(req, before, result.outcome, result.reason, result.message, result.backend, started)
    return response, result.outcome, result.reason


def mutate_pod(
    req: AdmissionRequest,
    list_backends: Callable[[str], list[dict[str, Any]]],
    ctx: InjectContext,
) -> tuple[dict[str, Any], str, str]:
    """(AdmissionReview response, outcome, reason); the response always allows."""
    started = time.perf_counter()
    if req.operation != "CREATE":
        _log(
            req,
            req.obj,
            OUTCOME_SKIPPED,
            REASON_NOT_CREATE,
            f"{req.operation or 'unknown'} is not wired (CREATE only)",
            None,
            started,
        )
        return allow(req.uid), OUTCOME_SKIPPED, REASON_NOT_CREATE
    pod = _decode_pod(req)
    if pod is None:
        # No Pod to patch: stale annotations cannot be cleared on this path.
        _log(
            req,
            None,
            OUTCOME_FAIL_OPEN,
            REASON_DECODE_ERROR,
            "the request object is not a decodable Pod",
            None,
            started,
        )
        return allow(req.uid), OUTCOME_FAIL_OPEN, REASON_DECODE_ERROR
    namespace = req.namespace or str((pod.get("metadata") or {}).get("namespace") or "")
    try:
        backends = list(list_backends(namespace))
    except Exception as exc:  # any list failure (API, network, file) fails open
        stripped = copy.deepcopy(pod)
        strip_decision_annotations(stripped)
        message = f"listing CacheBackends failed: {type(exc).__name__}: {exc}"
        result = WiringResult(stripped, OUTCOME_FAIL_OPEN, REASON_LIST_ERROR, message)
        return _answer(req, pod, result, started)
    try:
        result = wire_pod(pod, backends, ctx, namespace=namespace)
    except Exception as exc:  # wire_pod is total; this is a last line of defence
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
