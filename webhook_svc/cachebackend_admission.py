"""CacheBackend admission: the defaulting (mutating) and validating webhooks, pure.

``mutate_cachebackend`` answers with a minimal JSONPatch of the context-dependent
defaults (shared.defaulting). ``validate_cachebackend`` judges the object as if it
had been applied (CRD schema defaults and the webhook defaults first), so a raw
manifest replayed with curl is judged like the same manifest applied with kubectl.
A denial is the API server's own Invalid status: every field error at once.

Neither function does I/O and neither raises: an unexpected exception becomes a
denial carrying the error (status code 500 inside an HTTP 200 AdmissionReview).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from shared import constants as c
from shared.defaulting import default_cachebackend
from shared.json_diff import json_patch
from shared.objects import metadata
from shared.validation import FieldError, aggregate_message, validate, warnings
from webhook_svc.admission_review import AdmissionRequest, allow, deny, failure_status

log = logging.getLogger("icache.webhook.cachebackend")

QUALIFIED_KIND: Final = f"{c.KIND}.{c.GROUP}"
_JUDGED_OPERATIONS: Final = frozenset({"CREATE", "UPDATE"})


def invalid_status(name: str, errors: Sequence[FieldError]) -> dict[str, Any]:
    """apierrors.NewInvalid(CacheBackend.inferencecache.io, name, errs).ErrStatus."""
    return failure_status(
        422,
        "Invalid",
        f"{QUALIFIED_KIND} {json.dumps(name)} is invalid: {aggregate_message(errors)}",
        details={
            "name": name,
            "group": c.GROUP,
            "kind": c.KIND,
            "causes": [
                {"reason": e.type.value, "message": e.body(), "field": str(e.field)} for e in errors
            ],
        },
    )


def internal_error_denial(uid: str, exc: Exception, *, while_admitting: bool) -> dict[str, Any]:
    """The denial of a CacheBackend request the webhook failed to judge: 500
    InternalError naming the exception (and, ``while_admitting``, the kind)."""
    where = f" while admitting {QUALIFIED_KIND}" if while_admitting else ""
    return deny(
        uid,
        failure_status(
            500,
            "InternalError",
            f"inference-cache webhook internal error{where}: {type(exc).__name__}: {exc}",
        ),
    )


def _internal_error(req: AdmissionRequest, exc: Exception) -> dict[str, Any]:
    log.exception("cachebackend admission failed", extra={"uid": req.uid})
    return internal_error_denial(req.uid, exc, while_admitting=True)


def _skips(req: AdmissionRequest) -> bool:
    """DELETE/CONNECT, and writes to a subresource (status), are not judged."""
    return req.operation not in _JUDGED_OPERATIONS or bool(req.raw.get("subResource"))


def _name(req: AdmissionRequest, obj: Mapping[str, Any]) -> str:
    name = metadata(obj).get("name")
    return name if isinstance(name, str) and name else req.name


def mutate_cachebackend(req: AdmissionRequest) -> dict[str, Any]:
    """AdmissionReview answering the defaulting webhook (never denies on valid input)."""
    try:
        if _skips(req) or req.obj is None:
            return allow(req.uid)
        defaulted = default_cachebackend(req.obj, req.operation, req.old_obj)
        return allow(req.uid, patch=json_patch(req.obj, defaulted))
    except Exception as exc:  # the webhook must answer; see module docstring
        return _internal_error(req, exc)


def introduced_errors(
    errors: Sequence[FieldError], old_errors: Sequence[FieldError]
) -> list[FieldError]:
    """ValidateUpdate: only violations the update introduces, compared by
    (Type, Field, BadValue, Detail) — a different bad value on the same field is new."""
    existing = {e.key() for e in old_errors}
    return [e for e in errors if e.key() not in existing]


def validate_cachebackend(req: AdmissionRequest) -> dict[str, Any]:
    """AdmissionReview answering the validating webhook."""
    try:
        if _skips(req):
            return allow(req.uid)
        if req.obj is None:
            return deny(
                req.uid,
                failure_status(
                    400, "BadRequest", f"request.object is not a decodable {QUALIFIED_KIND}"
                ),
            )
        obj = default_cachebackend(req.obj, req.operation, req.old_obj)
        errors = validate(obj, req.namespace)
        if errors and req.operation == "UPDATE" and req.old_obj is not None:
            old = default_cachebackend(req.old_obj, "UPDATE", None)
            errors = introduced_errors(errors, validate(old, req.namespace))
        notes = warnings(obj)
        if errors:
            return deny(req.uid, invalid_status(_name(req, obj), errors), notes)
        return allow(req.uid, warnings=notes)
    except Exception as exc:  # the webhook must answer; see module docstring
        return _internal_error(req, exc)
