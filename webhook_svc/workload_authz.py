"""The validating webhook's guard against privilege escalation through a CacheBackend.

Two powers, two permissions. A CacheBackend shapes the engine pods it selects: its
engineSelector picks them, spec.lmCache.workerImage becomes a container in them (one
that sees the node's GPUs), engineOverrides adds env (valueFrom Secrets included) and
args, engineHostNetwork their network, remoteStorage where they send prompt-derived KV
data and load blocks from. Its annotations open its managed tier to other namespaces
(consent, which also copies the tier's password there) or to every pod
(skip-network-policy). So CREATE of any backend, and an UPDATE that changes what the
engine pods get, opens the tier or moves its data (``engine_access_change``), needs
``create pods`` in the namespace. Beyond that:

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

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson

from kubeio.resources import SUBJECT_ACCESS_REVIEWS
from shared import constants as c
from shared.api.models import CacheBackend
from shared.defaulting import default_cachebackend
from shared.engine_versions import SAMPLE_TARGETS
from shared.jsoncopy import json_copy
from shared.objects import meta
from shared.pod_wiring import DEFAULT_NAMESPACE, OUTCOME_FAIL_OPEN, wire_pod
from shared.runtime_adapters.base import InjectContext
from shared.runtime_adapters.engine import SGLANG_CONTAINER, VLLM_CONTAINER
from shared.storage_providers.render import (
    managed_provider,
    network_policy_skipped,
    render_workload,
)
from shared.tenancy import allowed_consumer_namespaces
from webhook_svc.admission_review import AdmissionRequest, deny, failure_status

if TYPE_CHECKING:
    from kubeio.async_client import ApiServer

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
PODS: Final = Access("", "pods")

# The spec fields that shape the engine pods a backend selects, as paths under spec, in
# the order a denial names the first one that differs: which pods (engineSelector), a
# container of our choice in them (lmCache.workerImage, with the node's GPUs), their
# env (valueFrom Secrets included) and args (integration.engineOverrides), and their
# network namespace (integration.engineHostNetwork).
ENGINE_SHAPING_FIELDS: Final = (
    ("engineSelector",),
    ("lmCache", "workerImage"),
    ("integration", "engineOverrides"),
    ("integration", "engineHostNetwork"),
)


class ReviewError(Exception):
    """The SubjectAccessReview could not be made."""


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


def spec_value(obj: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    """The value at ``path`` under the object's spec; None when any step is absent."""
    value: Any = (obj or {}).get("spec")
    for step in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(step)
    return value


def engine_shaping_signature(obj: Mapping[str, Any] | None) -> str:
    """The engine-shaping fields of ``obj`` as canonical JSON: equal when an update
    leaves the fields named in ENGINE_SHAPING_FIELDS alone."""
    values = [spec_value(obj, path) for path in ENGINE_SHAPING_FIELDS]
    return json.dumps(values, sort_keys=True, default=str)


# ------------------------------------------------------------- the sample engine pod
#
# What a backend puts in the engine pods it selects is judged by wiring one fixed
# engine pod with the old and the new backend (the Pod webhook's own pure wiring) and
# comparing the two: whatever field moves the data (provider, ownership, endpoint, the
# credentials reference), adds a container, env or args, or changes the network, shows
# there, without a list of fields to keep in step with the wiring.

SAMPLE_MODEL: Final = "inferencecache.invalid/sample-model"
# The webhook's subscriber image is a setting, not part of the backend: a fixed one,
# so the observation sidecar a backend asks for is compared too.
SAMPLE_CONTEXT: Final = InjectContext(
    kvevent_subscriber_image="inferencecache.invalid/kvevent-subscriber:sample"
)
# A managed tier's address comes from the backend (shared.pod_wiring.resolve_binding);
# the status only says whether it is published. Both sides are judged published.
SAMPLE_PUBLISHED: Final = "published.inferencecache.invalid:1"


# The sample pod's labels. Both backends are judged as if they selected it: which pods
# a backend selects is compared on its own (spec.engineSelector), so a backend that
# selects no pod yet is still judged on what it would put in one.
SAMPLE_LABELS: Final = {"inferencecache.io/sample": "engine"}


def sample_engine_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    """One engine pod of the backend's runtime, as a Deployment would create it: the
    release the samples target, nothing of its own configured."""
    spec = obj.get("spec") or {}
    if spec.get("runtime") == c.RUNTIME_SGLANG:
        engine = {
            "name": SGLANG_CONTAINER,
            "image": f"lmsysorg/sglang:v{SAMPLE_TARGETS.sglang}",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--model-path", SAMPLE_MODEL],
        }
    else:
        engine = {
            "name": VLLM_CONTAINER,
            "image": f"vllm/vllm-openai:v{SAMPLE_TARGETS.vllm}",
            "args": ["--model", SAMPLE_MODEL],
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "sample-", "labels": dict(SAMPLE_LABELS)},
        "spec": {"containers": [engine]},
    }


def sample_wiring(obj: Mapping[str, Any] | None, pod: dict[str, Any]) -> bytes | None:
    """The sample pod as ``obj`` wires it (outcome, reason, pod), canonical JSON, the
    backend selecting it and published. None when the wiring fails open: the sample
    then shows nothing of what the backend would do to another pod, and the caller
    compares the whole spec."""
    if obj is None:
        return None
    backend = json_copy(dict(obj))
    spec = backend.get("spec")
    if not isinstance(spec, dict):
        return None
    spec["engineSelector"] = {"matchLabels": dict(SAMPLE_LABELS)}
    backend["status"] = {"endpoint": SAMPLE_PUBLISHED}
    namespace = meta(backend).namespace or DEFAULT_NAMESPACE
    try:
        result = wire_pod(json_copy(pod), [backend], SAMPLE_CONTEXT, namespace=namespace)
    except Exception:
        return None
    if result.outcome == OUTCOME_FAIL_OPEN:
        return None
    return orjson.dumps([result.outcome, result.reason, result.pod], option=orjson.OPT_SORT_KEYS)


def engine_wiring_changed(obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None) -> bool:
    """Rule "Changes that shape engine pods or move their data": the fixed sample engine
    pod is wired differently by the new backend than by the old one. When either side
    fails to wire it, any spec change counts (fail closed)."""
    if obj is None:
        return True
    if _wiring_inputs(obj) == _wiring_inputs(old_obj):
        return False  # the wiring is a pure function of these: nothing to wire
    pod = sample_engine_pod(obj)
    new, old = sample_wiring(obj, pod), sample_wiring(old_obj, pod)
    if new is None or old is None:
        return (obj or {}).get("spec") != (old_obj or {}).get("spec")
    return new != old


def _wiring_inputs(obj: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What of a backend the Pod webhook's wiring reads (its status aside, which the
    sample replaces): its identity, annotations and spec. A label edit or a status
    write leaves them alone."""
    view = meta(obj)
    return (view.name, view.namespace, view.uid, view.annotations, (obj or {}).get("spec"))


def consent_widened(obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None) -> bool:
    """Rule "Widening consent opens the tier": the annotation
    ``inferencecache.io/allowed-consumer-namespaces`` names a namespace it did not (the
    worker then admits that namespace's engines and copies the tier's password there).
    Narrowing it, or removing it, is free."""
    return bool(_consent(obj) - _consent(old_obj))


def isolation_dropped(obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None) -> bool:
    """Rule "Dropping isolation opens the tier": ``inferencecache.io/skip-network-policy``
    turns on (the tier's NetworkPolicy goes; an LMCache server has no password behind
    it). Turning isolation back on is free."""
    return _skips_policy(obj) and not _skips_policy(old_obj)


def cross_namespace_opened(
    obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None
) -> bool:
    """Rule "Crossing namespaces is engine-shaping": ``spec.allowCrossNamespace`` turns on
    (the endpoint may then name another namespace's tier, and the engines read that
    tier's copied credentials). Turning it off is free."""
    return bool(spec_value(obj, ("allowCrossNamespace",))) and not bool(
        spec_value(old_obj, ("allowCrossNamespace",))
    )


def _parsed(obj: Mapping[str, Any] | None) -> CacheBackend | None:
    if obj is None:
        return None
    try:
        return CacheBackend.model_validate(obj)
    except Exception:
        return None


def _consent(obj: Mapping[str, Any] | None) -> frozenset[str]:
    cb = _parsed(obj)
    return allowed_consumer_namespaces(cb) if cb is not None else frozenset()


def _skips_policy(obj: Mapping[str, Any] | None) -> bool:
    cb = _parsed(obj)
    return network_policy_skipped(cb) if cb is not None else False


CONSENT_FIELD: Final = f"metadata.annotations[{c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES}]"
SKIP_POLICY_FIELD: Final = f"metadata.annotations[{c.ANNOTATION_SKIP_NETWORK_POLICY}]"
# The fields a wiring difference is named by, in order; then any other spec key.
_WIRING_FIELDS: Final = (
    ("remoteStorage", "provider"),
    ("remoteStorage", "ownership"),
    ("remoteStorage", "endpoint"),
    *ENGINE_SHAPING_FIELDS[1:],
)


def _changed_spec_field(obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None) -> str:
    """The first named field whose value differs (set, changed or removed), else the
    first top-level spec key that differs, else ``spec``."""
    for path in _WIRING_FIELDS:
        if spec_value(obj, path) != spec_value(old_obj, path):
            return "spec." + ".".join(path)
    spec = (obj or {}).get("spec") or {}
    old_spec = (old_obj or {}).get("spec") or {}
    for key in sorted(set(spec) | set(old_spec)):
        if spec.get(key) != old_spec.get(key):
            return f"spec.{key}"
    return "spec"


def engine_access_change(
    obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None
) -> str | None:
    """The one rule for what an UPDATE needs ``create pods`` for: a change that shapes
    the engine pods, opens the tier, or moves its data. The field a denial names, or
    None when the update needs nothing (a label, a narrowed consent, isolation back on,
    a scale, a status write)."""
    selector = ("engineSelector",)
    if spec_value(obj, selector) != spec_value(old_obj, selector):
        return "spec.engineSelector"
    if consent_widened(obj, old_obj):
        return CONSENT_FIELD
    if isolation_dropped(obj, old_obj):
        return SKIP_POLICY_FIELD
    if cross_namespace_opened(obj, old_obj):
        return "spec.allowCrossNamespace"
    if engine_shaping_signature(obj) != engine_shaping_signature(old_obj) or (
        engine_wiring_changed(obj, old_obj)
    ):
        return _changed_spec_field(obj, old_obj)
    return None


def engine_shaping_access(
    operation: str, obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None
) -> list[Access]:
    """Spec rule "Engine-shaping needs engine-level permission": ``create pods`` on
    CREATE of any backend, and on an UPDATE ``engine_access_change`` names."""
    if operation == "CREATE":
        return [PODS]
    if operation == "UPDATE" and engine_access_change(obj, old_obj) is not None:
        return [PODS]
    return []


def workload_access(
    operation: str, obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None
) -> list[Access]:
    """The workload kind a managed backend makes the controller create (Deployments
    always, plus StatefulSets for deploymentKind StatefulSet), on CREATE and on an
    UPDATE that changes the rendered workload's kind or pod template."""
    new = workload_signature(obj)
    if new is None:
        return []
    if operation == "UPDATE" and new == workload_signature(old_obj):
        return []
    if new[0] == c.DEPLOYMENT_KIND_STATEFULSET:
        return [DEPLOYMENTS, STATEFULSETS]
    return [DEPLOYMENTS]


def required_access(
    operation: str, obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None
) -> list[Access]:
    """The create permissions this write needs: the workload kinds (workload_access)
    and ``pods`` for what shapes the engines (engine_shaping_access). Objects are
    judged defaulted."""
    if operation not in ("CREATE", "UPDATE"):
        return []
    return [
        *workload_access(operation, obj, old_obj),
        *engine_shaping_access(operation, obj, old_obj),
    ]


def shaping_field(
    obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None, access: Access = DEPLOYMENTS
) -> str:
    """The spec field a denial points at: the first workload-shaping one that changed
    (on CREATE, the first one set); deploymentKind first when StatefulSets are what
    the user lacks."""
    if access == PODS:
        return engine_shaping_field(obj, old_obj)
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


def engine_shaping_field(obj: Mapping[str, Any] | None, old_obj: Mapping[str, Any] | None) -> str:
    """The field a ``create pods`` denial points at. On UPDATE, the one
    ``engine_access_change`` names (a removed field is named as itself); on CREATE, the
    first engine-shaping field set, spec.engineSelector when none is."""
    if old_obj is not None:
        changed = engine_access_change(obj, old_obj)
        if changed is not None:
            return changed
    for path in ENGINE_SHAPING_FIELDS:
        if spec_value(obj, path) is not None:
            return "spec." + ".".join(path)
    return "spec." + ".".join(ENGINE_SHAPING_FIELDS[0])


# kube-apiserver puts a superuser authorizer for this group first in every authorization
# chain, whatever --authorization-mode or AuthorizationConfiguration says
# (k8s.io/kubernetes pkg/kubeapiserver/authorizer/reload.go, NewPrivilegedGroups): a
# SubjectAccessReview for a member is always allowed. Asking would only cost a round trip.
PRIVILEGED_GROUP: Final = "system:masters"


def authorized_by_privileged_group(user: Mapping[str, Any]) -> bool:
    """The user is in ``system:masters``: the API server would answer every review
    "allowed", so none is made (proved against the real API server in
    tests/integration/webhook/test_workload_authz.py)."""
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
    return {
        "apiVersion": SUBJECT_ACCESS_REVIEWS.api_version,
        "kind": SUBJECT_ACCESS_REVIEWS.kind,
        "spec": spec,
    }


def _status(code: int, reason: str, message: str, name: str, field: str) -> dict[str, Any]:
    return failure_status(
        code,
        reason,
        message,
        details={
            "name": name,
            "group": c.GROUP,
            "kind": c.PLURAL,
            "causes": [{"reason": "FieldValueForbidden", "message": message, "field": field}],
        },
    )


def forbidden_status(
    name: str, namespace: str, username: str, access: Access, field: str, why: str = ""
) -> dict[str, Any]:
    why_needed = (
        "this CacheBackend shapes the engine pods it selects (which pods, a container "
        "image in them, their env and args, their network, where they send cache data) "
        "and opens its tier (consent, NetworkPolicy)"
        if access == PODS
        else "this CacheBackend makes the controller create that workload with the pod "
        "template it shapes"
    )
    message = (
        f'{QUALIFIED_RESOURCE} "{name}" is forbidden: {field}: user "{username}" cannot create '
        f'{access} in namespace "{namespace}", and {why_needed} ({DOCS_HINT})'
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


# ----------------------------------------------------------------------- decision


@dataclass(frozen=True)
class ReviewPlan:
    """What the decision needs asked: one SubjectAccessReview per permission in
    ``needed``, for ``user``, judged against the defaulted objects."""

    user: Mapping[str, Any]
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    needed: tuple[Access, ...]


def review_possible(req: AdmissionRequest) -> bool:
    """Whether judging ``req`` may ask the API server: a CREATE or UPDATE of the object
    itself (not a subresource) by someone outside ``system:masters``."""
    if req.operation not in ("CREATE", "UPDATE") or req.raw.get("subResource"):
        return False
    return not authorized_by_privileged_group(user_info(req))


def review_plan(req: AdmissionRequest) -> ReviewPlan | None:
    """The reviews a write the validator allowed still needs; None when it needs none
    (a member of ``system:masters``, a subresource, a DELETE, or an update that leaves
    both the engine-shaping fields and the managed workload's pod template alone)."""
    if not review_possible(req):
        return None
    obj = default_cachebackend(req.obj, req.operation, req.old_obj) if req.obj else None
    old = default_cachebackend(req.old_obj, "UPDATE", None) if req.old_obj else None
    needed = required_access(req.operation, obj, old)
    if not needed:
        return None
    name = meta(obj).name or req.name
    return ReviewPlan(user_info(req), name, obj, old, tuple(needed))


# What one review came to: the answer's status, or why it could not be made.
Outcome = dict[str, Any] | ReviewError


def review_allows(outcome: Outcome) -> bool:
    if isinstance(outcome, ReviewError):
        return False
    st = outcome.get("status") or {}
    return bool(st.get("allowed")) and not st.get("denied")


def authorization_answer(
    req: AdmissionRequest,
    allowed_response: dict[str, Any],
    plan: ReviewPlan,
    outcomes: Sequence[Outcome],
) -> dict[str, Any]:
    """``allowed_response`` (the validator's allow, warnings included) when every
    review in ``plan`` allowed; else the denial for the first one that did not (403
    Forbidden, or 503 when it could not be made: fail closed). ``outcomes`` are the
    reviews' results in ``plan.needed`` order, up to the first that did not allow."""
    warnings = allowed_response["response"].get("warnings")
    username = plan.user.get("username")
    for index, access in enumerate(plan.needed):
        field = shaping_field(plan.obj, plan.old, access)
        if not username:
            status = unverified_status(plan.name, req.namespace, access, field, "no userInfo")
            return deny(req.uid, status, warnings)
        if index >= len(outcomes):
            why = "the review was not made"
            return deny(
                req.uid, unverified_status(plan.name, req.namespace, access, field, why), warnings
            )
        outcome = outcomes[index]
        if isinstance(outcome, ReviewError):
            log.warning(
                "SubjectAccessReview failed; denying",
                extra={"uid": req.uid, "error": str(outcome), "user": username},
            )
            status = unverified_status(plan.name, req.namespace, access, field, str(outcome))
            return deny(req.uid, status, warnings)
        if not review_allows(outcome):
            reason = str((outcome.get("status") or {}).get("reason") or "")
            status = forbidden_status(
                plan.name, req.namespace, str(username), access, field, reason
            )
            return deny(req.uid, status, warnings)
    return allowed_response


def access_reviews(req: AdmissionRequest, plan: ReviewPlan) -> list[dict[str, Any]]:
    """The SubjectAccessReview bodies of ``plan``, in order; none without a user."""
    if not plan.user.get("username"):
        return []
    return [access_review(plan.user, req.namespace, access) for access in plan.needed]


# ----------------------------------------------------------------------- shell


# The validating webhook's timeoutSeconds is 10 and a backend may need three reviews
# (Deployments, StatefulSets, pods): each gets a hard wall-clock budget inside it.
DEFAULT_REVIEW_BUDGET_SECONDS: Final = 3.0


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
    """The wording for an HTTP error ("API server said 403 Forbidden")."""
    try:
        return f"API server said {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"API server said {status}"


class AccessReviewer(Protocol):
    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        """The review's outcome (``review_outcome``), or ReviewError."""


class ReviewCache:
    """SubjectAccessReview answers kept for a while, as kube-apiserver's webhook
    authorizer keeps them (--authorization-webhook-cache-authorized-ttl and
    -unauthorized-ttl): an allowed answer for ``allowed_ttl`` seconds, a denied one for
    ``denied_ttl``; 0 keeps none. A review that could not be made is never kept. The
    key is the whole review (user, groups, uid, extra, namespace, verb, resource), so
    two requests share an answer only when the API server would be asked the same
    question. At most ``max_entries`` answers, the oldest dropped first."""

    def __init__(self, allowed_ttl: float, denied_ttl: float, max_entries: int = 4096) -> None:
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self.max_entries = max_entries
        self._answers: dict[bytes, tuple[float, dict[str, Any]]] = {}

    @staticmethod
    def key(body: Mapping[str, Any]) -> bytes:
        return orjson.dumps(body.get("spec"), option=orjson.OPT_SORT_KEYS)

    def get(self, key: bytes, now: float) -> dict[str, Any] | None:
        found = self._answers.get(key)
        if found is None:
            return None
        expires, outcome = found
        if now >= expires:
            del self._answers[key]
            return None
        return outcome

    def put(self, key: bytes, outcome: dict[str, Any], now: float) -> None:
        ttl = self.allowed_ttl if review_allows(outcome) else self.denied_ttl
        if ttl <= 0:
            return
        self._answers.pop(key, None)
        self._answers[key] = (now + ttl, outcome)
        while len(self._answers) > self.max_entries:
            del self._answers[next(iter(self._answers))]


class ApiAccessReviewer:
    """SubjectAccessReviews through the webhook's API client, each within ``budget``;
    answers kept in ``cache`` when one is given."""

    def __init__(
        self,
        api: ApiServer,
        budget: float = DEFAULT_REVIEW_BUDGET_SECONDS,
        cache: ReviewCache | None = None,
    ) -> None:
        self._api = api
        self._budget = budget
        self._cache = cache

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        cache = self._cache
        if cache is None:
            return await self._ask(body)
        key, now = cache.key(body), time.monotonic()
        kept = cache.get(key, now)
        if kept is not None:
            return kept
        outcome = await self._ask(body)
        cache.put(key, outcome, time.monotonic())
        return outcome

    async def _ask(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            status, data = await self._api.post(
                SUBJECT_ACCESS_REVIEWS.collection(), body, self._budget
            )
        except TimeoutError as exc:
            raise ReviewError(str(exc)) from None
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


async def authorize(
    req: AdmissionRequest,
    allowed_response: dict[str, Any],
    reviewer: AccessReviewer,
    plan: ReviewPlan | None,
) -> dict[str, Any]:
    """The validator's ``allowed_response``, or the denial the reviews of ``plan``
    (``review_plan(req)``) call for: each review awaited in turn, stopping at the
    first that does not allow."""
    if plan is None:
        return allowed_response
    outcomes: list[Outcome] = []
    for body in access_reviews(req, plan):
        outcome: Outcome
        try:
            outcome = await reviewer.review(body)
        except ReviewError as exc:
            outcome = exc
        outcomes.append(outcome)
        if not review_allows(outcome):
            break
    return authorization_answer(req, allowed_response, plan, outcomes)
