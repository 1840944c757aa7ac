"""AdmissionReview (admission.k8s.io/v1) in and out: parsing and responses (the JSON
patches they carry are built by shared/json_diff.py)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

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
