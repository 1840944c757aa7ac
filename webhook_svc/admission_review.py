"""AdmissionReview (admission.k8s.io/v1) in and out: parsing, responses, JSON patches."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from shared import json_diff
from shared.jsoncopy import json_copy
from webhook_svc.http.codec import encode_json


class BadReviewError(ValueError):
    """The request body is not an AdmissionReview we can answer: HTTP 400."""


@dataclass
class AdmissionRequest:
    uid: str
    operation: str
    namespace: str
    name: str
    kind: dict[str, Any]
    obj: dict[str, Any] | None
    old_obj: dict[str, Any] | None
    dry_run: bool
    raw: dict[str, Any] = field(repr=False)


def parse_review(body: Any) -> AdmissionRequest:
    if not isinstance(body, dict):
        raise BadReviewError("body must be a JSON object (an AdmissionReview)")
    request = body.get("request")
    if not isinstance(request, dict):
        raise BadReviewError("AdmissionReview.request is missing")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReviewError("AdmissionReview.request.uid is missing")
    kind = request.get("kind")
    obj = request.get("object")
    old = request.get("oldObject")
    return AdmissionRequest(
        uid=uid,
        operation=str(request.get("operation") or ""),
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or ""),
        kind=kind if isinstance(kind, dict) else {},
        obj=obj if isinstance(obj, dict) else None,
        old_obj=old if isinstance(old, dict) else None,
        dry_run=bool(request.get("dryRun")),
        raw=request,
    )


def review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def allow(
    uid: str,
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encode_json(patch)).decode()
    if warnings:
        response["warnings"] = warnings
    if message:
        response["status"] = {"code": 200, "message": message}
    return review(response)


def failure_status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A metav1.Status for a refused request (``status: Failure``), as apierrors builds
    its ErrStatus: the one shape of every denial this webhook sends."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        status["details"] = details
    status["code"] = code
    return status


def deny(uid: str, status: dict[str, Any], warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": False, "status": status}
    if warnings:
        response["warnings"] = warnings
    return review(response)


def patch_reproduces(before: dict[str, Any], patch: list[dict[str, Any]], after: Any) -> bool:
    """Whether ``patch`` applied to a copy of ``before`` gives a document equal to ``after``."""
    try:
        try:
            patched = json_diff.apply(json_copy(before), patch)
        except json_diff.UnsupportedOpError:  # jsonpatch's patches may move and copy
            patched = jsonpatch.apply_patch(json_copy(before), patch, in_place=True)
        return json_diff.same(patched, after)
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        LookupError,
        TypeError,
        ValueError,
    ):
        return False


def json_patch(
    before: dict[str, Any],
    after: dict[str, Any],
    fallback: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """An RFC 6902 patch from ``before`` to ``after`` (only what changes), each candidate
    applied and checked once.

    The fast diff (shared.json_diff), checked by applying it to a copy; jsonpatch's
    search for a minimal patch if that check ever fails. With ``fallback``, jsonpatch's
    patch is checked too, and ``fallback(before, after)`` answers if it fails.
    """
    fast = json_diff.diff(before, after)
    if patch_reproduces(before, fast, after):
        return fast
    ops: list[dict[str, Any]] = jsonpatch.make_patch(before, after).patch
    if fallback is None or patch_reproduces(before, ops, after):
        return ops
    return fallback(before, after)
