"""The validating webhook's guard against privilege escalation through a CacheBackend.

A CacheBackend with a managed provider makes the controller create a Deployment (or
StatefulSet) whose pod template the backend shapes: image, serviceAccountName,
securityContext, tolerations, node placement. Whoever may write such a backend can
therefore run any pod in its namespace — the power of ``create deployments``. So the
webhook asks the API server (a SubjectAccessReview for the requesting user, exactly as
the AdmissionReview names them) whether that user may create the workload kind:

- on CREATE of a backend that renders a managed workload;
- on UPDATE when the rendered workload's kind or pod template changes (a scale, a
  status write, an annotation, a host-only backend: no check).

Denied: 403 Forbidden with the field that shapes the workload. A review that cannot be
made (API error, no user in the request) fails closed — the CacheBackend webhooks are
failurePolicy Fail already, so an unreachable check never lets a write through that
the API server would not have let through either. Embedded mode (--backends-from) has
no API server and runs no check (``icache webhook`` logs that).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson

from shared import constants as c
from shared.api.models import CacheBackend
from shared.defaulting import default_cachebackend
from shared.storage_providers.render import managed_provider, render_workload
from webhook_svc.admission_review import AdmissionRequest, deny

if TYPE_CHECKING:
    from shared.kubeclient import KubeClient
    from webhook_svc.async_kube import AsyncKubeReader

log = logging.getLogger("icache.webhook.authz")

QUALIFIED_RESOURCE: Final = f"{c.PLURAL}.{c.GROUP}"
DOCS_HINT: Final = 'docs/install.md, "Who may create CacheBackends"'
# Pod-template fields, in the order a denial names the first one that differs.
_SHAPING_FIELDS: Final = ("template", "remoteStorage", "deploymentKind", "runtime", "type")


@dataclass(frozen=True)
class Access:
    """One ``create`` permission the requesting user must hold."""

    group: str
    resource: str

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


DEPLOYMENTS: Final = Access("apps", "deployments")
STATEFULSETS: Final = Access("apps", "statefulsets")


class ReviewError(Exception):
    """The SubjectAccessReview could not be made."""


class AccessReviewer(Protocol):
    def review(self, body: dict[str, Any]) -> dict[str, Any]: ...


class AsyncAccessReviewer(Protocol):
    async def review(self, body: dict[str, Any]) -> dict[str, Any]: ...


# ----------------------------------------------------------------------- pure


def workload_signature(obj: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(kind, pod template as canonical JSON) of the managed workload ``obj`` renders;
    None when it renders none. An object that cannot be read counts as rendering one
    (the check then runs: fail closed)."""
    if obj is None:
        return None
    try:
        cb = CacheBackend.model_validate(obj)
        provider = managed_provider(cb)
        if provider is None:
            return None
        workload = render_workload(cb, provider)
    except Exception:
        return ("?", "unreadable")
    template = json.dumps(workload["spec"]["template"], sort_keys=True)
    return str(workload["kind"]), template


def required_access(
    operation: str, obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None
) -> list[Access]:
    """The create permissions this write needs: the workload kind it makes the
    controller create (Deployments always — the guard's baseline — plus StatefulSets
    for deploymentKind StatefulSet). Objects are judged defaulted."""
    if operation not in ("CREATE", "UPDATE"):
        return []
    new = workload_signature(obj)
    if new is None:
        return []
    if operation == "UPDATE" and new == workload_signature(old_obj):
        return []
    if new[0] == c.DEPLOYMENT_KIND_STATEFULSET:
        return [DEPLOYMENTS, STATEFULSETS]
    return [DEPLOYMENTS]


def shaping_field(
    obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None, access: Access = DEPLOYMENTS
) -> str:
    """The spec field a denial points at: the first workload-shaping one that changed
    (on CREATE, the first one set); deploymentKind first when StatefulSets are what
    the user lacks."""
    spec = (obj or {}).get("spec") or {}
    old_spec = (old_obj or {}).get("spec") or {}
    order = list(_SHAPING_FIELDS)
    if access == STATEFULSETS:
        order.remove("deploymentKind")
        order.insert(0, "deploymentKind")
    for key in order:
        if key in spec and spec.get(key) != old_spec.get(key):
            return f"spec.{key}"
    return "spec"


# kube-apiserver puts a superuser authorizer for this group first in every authorization
# chain, whatever --authorization-mode or AuthorizationConfiguration says
# (k8s.io/kubernetes pkg/kubeapiserver/authorizer/reload.go, NewPrivilegedGroups): a
# SubjectAccessReview for a member is always allowed. Asking would only cost a round trip.
PRIVILEGED_GROUP: Final = "system:masters"


def authorized_by_privileged_group(user: Mapping[str, Any]) -> bool:
    """The user is in ``system:masters``: the API server would answer every review
    "allowed", so none is made (issue 12; proved against the real API server in
    tests/integration/test_workload_authz.py)."""
    groups = user.get("groups")
    return isinstance(groups, list) and PRIVILEGED_GROUP in groups and bool(user.get("username"))


def user_info(req: AdmissionRequest) -> dict[str, Any]:
    info = req.raw.get("userInfo")
    return info if isinstance(info, dict) else {}


def access_review(user: Mapping[str, Any], namespace: str, access: Access) -> dict[str, Any]:
    """A SubjectAccessReview for ``user`` (AdmissionReview userInfo) creating ``access``."""
    spec: dict[str, Any] = {
        "user": user.get("username") or "",
        "resourceAttributes": {
            "namespace": namespace,
            "verb": "create",
            "group": access.group,
            "resource": access.resource,
        },
    }
    for key in ("groups", "uid", "extra"):
        if user.get(key):
            spec[key] = user[key]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def _status(code: int, reason: str, message: str, name: str, field: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {
            "name": name,
            "group": c.GROUP,
            "kind": c.PLURAL,
            "causes": [{"reason": "FieldValueForbidden", "message": message, "field": field}],
        },
        "code": code,
    }


def forbidden_status(
    name: str, namespace: str, username: str, access: Access, field: str, why: str = ""
) -> dict[str, Any]:
    message = (
        f'{QUALIFIED_RESOURCE} "{name}" is forbidden: {field}: user "{username}" cannot create '
        f'{access} in namespace "{namespace}", and this CacheBackend makes the controller '
        f"create that workload with the pod template it shapes ({DOCS_HINT})"
    )
    if why:
        message += f": {why}"
    return _status(403, "Forbidden", message, name, field)


def unverified_status(
    name: str, namespace: str, access: Access, field: str, why: str
) -> dict[str, Any]:
    message = (
        f'{QUALIFIED_RESOURCE} "{name}": {field}: could not verify that the requesting user '
        f'may create {access} in namespace "{namespace}" ({why}); denied, try again'
    )
    return _status(503, "ServiceUnavailable", message, name, field)


# ----------------------------------------------------------------------- shell


# The decision, once, as a generator: it yields each SubjectAccessReview to make and is
# sent its answer (or thrown the ReviewError); its return value is the response. The
# threaded reviewer (authorize_workload) and the event-loop one
# (authorize_workload_async) only drive it.
Steps = Generator[dict[str, Any], dict[str, Any], dict[str, Any]]


def authorization_steps(req: AdmissionRequest, allowed_response: dict[str, Any]) -> Steps:
    """``allowed_response`` (the validator's allow, warnings included) unless the user
    lacks a permission the backend's workload needs; then a denial."""
    user = user_info(req)
    if authorized_by_privileged_group(user):
        return allowed_response
    obj = default_cachebackend(req.obj, req.operation, req.old_obj) if req.obj else None
    old = default_cachebackend(req.old_obj, "UPDATE", None) if req.old_obj else None
    needed = required_access(req.operation, obj, old)
    if not needed:
        return allowed_response
    name = str(((obj or {}).get("metadata") or {}).get("name") or req.name)
    warnings = allowed_response["response"].get("warnings")
    for access in needed:
        field = shaping_field(obj, old, access)
        if not user.get("username"):
            status = unverified_status(name, req.namespace, access, field, "no userInfo")
            return deny(req.uid, status, warnings)
        try:
            result = yield access_review(user, req.namespace, access)
        except ReviewError as exc:
            log.warning(
                "SubjectAccessReview failed; denying",
                extra={"uid": req.uid, "error": str(exc), "user": user.get("username")},
            )
            status = unverified_status(name, req.namespace, access, field, str(exc))
            return deny(req.uid, status, warnings)
        st = result.get("status") or {}
        if not st.get("allowed") or st.get("denied"):
            status = forbidden_status(
                name,
                req.namespace,
                str(user["username"]),
                access,
                field,
                str(st.get("reason") or ""),
            )
            return deny(req.uid, status, warnings)
    return allowed_response


Outcome = dict[str, Any] | ReviewError


def _advance(steps: Steps, outcome: Outcome | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Feed ``outcome`` (None to start) to ``steps``: (the next review to make, {}) or
    (None, the response). The one place the generator protocol is spoken."""
    try:
        if outcome is None:
            return next(steps), {}
        if isinstance(outcome, ReviewError):
            return steps.throw(outcome), {}
        return steps.send(outcome), {}
    except StopIteration as done:
        return None, done.value


def authorize_workload(
    req: AdmissionRequest, reviewer: AccessReviewer, allowed_response: dict[str, Any]
) -> dict[str, Any]:
    """``authorization_steps`` with each review asked of ``reviewer`` (blocking)."""
    steps = authorization_steps(req, allowed_response)
    body, response = _advance(steps, None)
    while body is not None:
        outcome: Outcome
        try:
            outcome = reviewer.review(body)
        except ReviewError as exc:
            outcome = exc
        body, response = _advance(steps, outcome)
    return response


async def authorize_workload_async(
    req: AdmissionRequest, reviewer: AsyncAccessReviewer, allowed_response: dict[str, Any]
) -> dict[str, Any]:
    """``authorization_steps`` with each review awaited on the event loop."""
    steps = authorization_steps(req, allowed_response)
    body, response = _advance(steps, None)
    while body is not None:
        outcome: Outcome
        try:
            outcome = await reviewer.review(body)
        except ReviewError as exc:
            outcome = exc
        body, response = _advance(steps, outcome)
    return response


def review_possible(req: AdmissionRequest) -> bool:
    """Whether judging ``req`` may ask the API server: a CREATE or UPDATE of the object
    itself (not a subresource) by someone outside ``system:masters``."""
    if req.operation not in ("CREATE", "UPDATE") or req.raw.get("subResource"):
        return False
    return not authorized_by_privileged_group(user_info(req))


def authorizing_async(
    validate: Callable[[AdmissionRequest], dict[str, Any]], reviewer: AsyncAccessReviewer
) -> Callable[[AdmissionRequest], Awaitable[dict[str, Any]]]:
    """``authorizing`` with the reviews awaited on the event loop."""

    async def handler(req: AdmissionRequest) -> dict[str, Any]:
        response = validate(req)
        if not response["response"].get("allowed") or not review_possible(req):
            return response
        return await authorize_workload_async(req, reviewer, response)

    return handler


def authorizing(
    validate: Callable[[AdmissionRequest], dict[str, Any]], reviewer: AccessReviewer | None
) -> Callable[[AdmissionRequest], dict[str, Any]]:
    """``validate`` followed, for what it allows, by the workload-permission check."""
    if reviewer is None:
        return validate

    def handler(req: AdmissionRequest) -> dict[str, Any]:
        response = validate(req)
        if not response["response"].get("allowed") or not review_possible(req):
            return response
        return authorize_workload(req, reviewer, response)

    return handler


# The validating webhook's timeoutSeconds is 10 and a backend may need two reviews
# (Deployments and StatefulSets): each gets a hard wall-clock budget well inside it. A
# socket timeout alone is no budget: the client library retries reads.
DEFAULT_REVIEW_BUDGET_SECONDS: Final = 3.0

_review_pool: ThreadPoolExecutor | None = None
_review_pool_lock = threading.Lock()


def _reviews() -> ThreadPoolExecutor:
    global _review_pool
    with _review_pool_lock:  # created in the serving process, on first use
        if _review_pool is None:
            _review_pool = ThreadPoolExecutor(8, thread_name_prefix="access-review")
        return _review_pool


def review_outcome(result: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a SubjectAccessReview answer the decision reads, or ReviewError."""
    status = result.get("status")
    if not isinstance(status, dict):
        raise ReviewError("SubjectAccessReview came back without a status")
    return {
        "status": {
            "allowed": bool(status.get("allowed")),
            "denied": bool(status.get("denied")),
            "reason": str(status.get("reason") or ""),
        }
    }


def api_server_said(status: int) -> str:
    """The threaded reviewer's wording for an HTTP error ("API server said 403 Forbidden")."""
    try:
        return f"API server said {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"API server said {status}"


SUBJECT_ACCESS_REVIEWS_PATH: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class AsyncApiAccessReviewer:
    """SubjectAccessReviews on the event loop (webhook_svc/async_kube.py), each under
    the same hard wall-clock budget as the threaded reviewer's."""

    def __init__(self, reader: AsyncKubeReader, budget: float = DEFAULT_REVIEW_BUDGET_SECONDS):
        self._reader = reader
        self._budget = budget

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + self._budget
        try:
            async with asyncio.timeout(self._budget):
                status, data = await self._reader.post(
                    SUBJECT_ACCESS_REVIEWS_PATH, orjson.dumps(body), deadline
                )
        except TimeoutError:
            raise ReviewError(f"no answer from the API server within {self._budget:g} s") from None
        except Exception as exc:  # connection errors
            raise ReviewError(f"{type(exc).__name__}: {exc}") from exc
        if status not in (200, 201):
            raise ReviewError(api_server_said(status))
        try:
            result = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ReviewError(f"unreadable SubjectAccessReview answer: {exc}") from exc
        if not isinstance(result, dict):
            raise ReviewError("SubjectAccessReview came back without a status")
        return review_outcome(result)


class ApiAccessReviewer:
    """SubjectAccessReviews through the webhook's own connection (a
    :class:`shared.kubeclient.KubeClient`; its timeout bounds each review)."""

    def __init__(self, kube: KubeClient, budget: float = DEFAULT_REVIEW_BUDGET_SECONDS) -> None:
        self._kube = kube
        self._budget = budget

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        future = _reviews().submit(self._review_now, body)
        try:
            return future.result(timeout=self._budget)
        except FutureTimeout:
            future.cancel()  # the abandoned call ends on its own socket timeout
            raise ReviewError(f"no answer from the API server within {self._budget:g} s") from None

    def _review_now(self, body: dict[str, Any]) -> dict[str, Any]:
        # Imported here: the pure admission path (and `icache admit-pod`) never pays
        # for the kubernetes client.
        from shared.kubeclient import SUBJECT_ACCESS_REVIEWS, ApiError

        try:
            result = self._kube.create(SUBJECT_ACCESS_REVIEWS, None, body)
        except ApiError as exc:
            raise ReviewError(f"API server said {exc.status} {exc.reason}") from exc
        except Exception as exc:  # timeouts, connection errors
            raise ReviewError(f"{type(exc).__name__}: {exc}") from exc
        return review_outcome(result)
