"""A CacheBackend is as powerful as a Pod create in its namespace, so the validating
webhook checks (SubjectAccessReview) that its writer may create the workload it
shapes. The decisions, pure (``review_plan``, ``authorization_answer``) and driven by
``authorize`` with a scripted reviewer; the client is tests/unit/kube_access/test_apiserver.py,
the real API server tests/integration/webhook/test_workload_authz.py."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import workload_review
from tests.fakes import FakeAccessReviewer
from webhook_svc.admission_review import AdmissionRequest, parse_review
from webhook_svc.cachebackend_admission import validate_cachebackend
from webhook_svc.workload_authz import (
    DEPLOYMENTS,
    PODS,
    STATEFULSETS,
    ReviewError,
    access_review,
    authorization_answer,
    authorize,
    required_access,
    review_plan,
    shaping_field,
)

MANAGED: dict[str, Any] = {
    "apiVersion": "inferencecache.io/v1alpha1",
    "kind": "CacheBackend",
    "metadata": {"name": "cb", "namespace": "team-a"},
    "spec": {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
    },
}
HOST_ONLY: dict[str, Any] = {**MANAGED, "spec": {"runtime": "VLLM"}}
USER = {
    "username": "alice",
    "uid": "u-1",
    "groups": ["team-a", "system:authenticated"],
    "extra": {"scopes": ["x"]},
}


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"].update(spec)
    return out


def test_create_of_a_managed_backend_needs_create_deployments_and_pods() -> None:
    assert required_access("CREATE", MANAGED, None) == [DEPLOYMENTS, PODS]
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    assert required_access("CREATE", sts, None) == [DEPLOYMENTS, STATEFULSETS, PODS]


def test_backends_without_a_workload_need_create_pods_only() -> None:
    """Rule "Engine-shaping needs engine-level permission": every backend shapes the
    engine pods it selects, so creating any backend needs ``create pods``."""
    assert required_access("CREATE", HOST_ONLY, None) == [PODS]
    external = with_spec(
        MANAGED,
        remoteStorage={"provider": "LMCacheServer", "ownership": "External", "endpoint": "h:1"},
    )
    assert required_access("CREATE", external, None) == [PODS]
    assert required_access("DELETE", MANAGED, None) == []


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        ({"engineSelector": {"matchLabels": {"app": "theirs"}}}, "spec.engineSelector"),
        ({"lmCache": {"workerImage": "evil.example/x:1"}}, "spec.lmCache.workerImage"),
        (
            {"integration": {"engineOverrides": {"env": [{"name": "A", "value": "b"}]}}},
            "spec.integration.engineOverrides",
        ),
        (
            {"integration": {"engineOverrides": {"suppressArgs": ["--x"]}}},
            "spec.integration.engineOverrides",
        ),
        ({"integration": {"engineHostNetwork": True}}, "spec.integration.engineHostNetwork"),
    ],
)
def test_an_update_of_an_engine_shaping_field_needs_create_pods(
    changed: dict[str, Any], field: str
) -> None:
    """Rule "Engine-shaping needs engine-level permission": workerImage, any
    engineOverrides field, engineSelector and engineHostNetwork; the denial names it.
    (Judged on the request, before validation: a value the validator later refuses
    still needs the permission to be written.)"""
    # engineHostNetwork is Mooncake's alone (the validator refuses it elsewhere).
    base = (
        with_spec(MANAGED, remoteStorage={"provider": "Mooncake", "ownership": "Managed"})
        if "engineHostNetwork" in field
        else HOST_ONLY
    )
    after = with_spec(base, **changed)
    assert required_access("UPDATE", after, base) == [PODS]
    assert shaping_field(after, base, PODS) == field
    resp = authorizing(FakeAccessReviewer({"deployments"}))(request(after, base))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert 'cannot create pods in namespace "team-a"' in resp["status"]["message"]
    assert resp["status"]["details"]["causes"][0]["field"] == field


def test_other_updates_need_nothing_new() -> None:
    """Labels, annotations and fields that shape no engine pod and no workload."""
    annotated = copy.deepcopy(HOST_ONLY)
    annotated["metadata"]["annotations"] = {"a": "b"}
    annotated["metadata"]["labels"] = {"c": "d"}
    assert required_access("UPDATE", annotated, HOST_ONLY) == []
    uncrossing = with_spec(HOST_ONLY, allowCrossNamespace=False)
    assert (
        required_access("UPDATE", uncrossing, with_spec(HOST_ONLY, allowCrossNamespace=True)) == []
    )
    reviewer = FakeAccessReviewer()
    assert authorizing(reviewer)(request(annotated, HOST_ONLY))["response"]["allowed"] is True
    assert reviewer.asked == []


def test_update_needs_it_only_when_the_workload_template_or_kind_changes() -> None:
    assert required_access("UPDATE", MANAGED, MANAGED) == []
    scaled = with_spec(MANAGED, replicas=3)
    assert required_access("UPDATE", scaled, MANAGED) == [], "scaling shapes no pod"
    annotated = copy.deepcopy(MANAGED)
    annotated["metadata"]["annotations"] = {"a": "b"}
    assert required_access("UPDATE", annotated, MANAGED) == []
    for changed in (
        with_spec(MANAGED, template={"serviceAccountName": "powerful"}),
        with_spec(MANAGED, template={"tolerations": [{"operator": "Exists"}]}),
    ):
        assert required_access("UPDATE", changed, MANAGED) == [DEPLOYMENTS]
    # Another provider: another workload, and engines that send their data elsewhere.
    mooncake = with_spec(MANAGED, remoteStorage={"provider": "Mooncake", "ownership": "Managed"})
    assert required_access("UPDATE", mooncake, MANAGED) == [DEPLOYMENTS, PODS]
    # Host-only → managed makes a workload appear, and the engines send data to it.
    assert required_access("UPDATE", MANAGED, HOST_ONLY) == [DEPLOYMENTS, PODS]
    # Managed → host-only: no workload to create; the engines' data moves (to none).
    assert required_access("UPDATE", HOST_ONLY, MANAGED) == [PODS]


def test_the_denial_points_at_the_field_that_shapes_the_workload() -> None:
    assert shaping_field(MANAGED, None) == "spec.remoteStorage"
    templated = with_spec(MANAGED, template={"serviceAccountName": "x"})
    assert shaping_field(templated, None) == "spec.template"
    assert shaping_field(templated, MANAGED) == "spec.template"
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    assert shaping_field(sts, MANAGED) == "spec.deploymentKind"
    assert shaping_field(sts, None) == "spec.remoteStorage"
    assert shaping_field(sts, None, STATEFULSETS) == "spec.deploymentKind"


def test_the_review_carries_the_requesting_user_as_the_admission_request_names_them() -> None:
    body = access_review(USER, "team-a", STATEFULSETS)
    assert body["kind"] == "SubjectAccessReview"
    assert body["spec"] == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["team-a", "system:authenticated"],
        "extra": {"scopes": ["x"]},
        "resourceAttributes": {
            "namespace": "team-a",
            "verb": "create",
            "group": "apps",
            "resource": "statefulsets",
        },
    }


def request(obj: dict[str, Any], old: dict[str, Any] | None = None, user: Any = USER) -> Any:
    """The parsed request of a review of ``obj`` by ``user``."""
    return parse_review(workload_review(obj, old, user))


def authorizing(reviewer: FakeAccessReviewer) -> Callable[[AdmissionRequest], dict[str, Any]]:
    """What the validating route does: validate, then the reviews for what it allows."""

    def handler(req: AdmissionRequest) -> dict[str, Any]:
        response = validate_cachebackend(req)
        if not response["response"]["allowed"]:
            return response
        return asyncio.run(authorize(req, response, reviewer, review_plan(req)))

    return handler


def test_a_user_who_may_not_create_deployments_is_denied_with_a_field_scoped_403() -> None:
    handler = authorizing(FakeAccessReviewer())
    resp = handler(request(MANAGED))["response"]
    assert resp["allowed"] is False
    status = resp["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert 'user "alice" cannot create deployments.apps in namespace "team-a"' in status["message"]
    assert status["details"]["causes"][0]["field"] == "spec.remoteStorage"


def test_a_user_who_may_is_allowed_and_nothing_is_asked_when_nothing_is_shaped() -> None:
    reviewer = FakeAccessReviewer({"deployments"})
    handler = authorizing(reviewer)
    assert handler(request(MANAGED))["response"]["allowed"] is False, "pods not granted"
    reviewer = FakeAccessReviewer({"deployments", "pods"})
    handler = authorizing(reviewer)
    assert handler(request(MANAGED))["response"]["allowed"] is True
    assert len(reviewer.asked) == 2
    reviewer.asked.clear()
    assert handler(request(with_spec(MANAGED, replicas=2), MANAGED))["response"]["allowed"]
    assert reviewer.asked == []
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    denied = handler(request(sts))["response"]
    assert denied["allowed"] is False
    assert "statefulsets.apps" in denied["status"]["message"]


@pytest.mark.parametrize(
    ("reviewer", "user"),
    [(FakeAccessReviewer(error=True), USER), (FakeAccessReviewer({"deployments"}), None)],
)
def test_a_review_that_cannot_be_made_fails_closed(reviewer: FakeAccessReviewer, user: Any) -> None:
    resp = authorizing(reviewer)(request(MANAGED, user=user))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 503
    assert "could not verify" in resp["status"]["message"]


def test_invalid_objects_are_denied_by_validation_before_any_review() -> None:
    reviewer = FakeAccessReviewer({"deployments"})
    bad = with_spec(MANAGED, remoteStorage={"provider": "LMCacheServer", "ownership": "External"})
    resp = authorizing(reviewer)(request(bad))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    assert reviewer.asked == []


def test_authorized_by_privileged_group_asks_nothing_for_system_masters() -> None:
    """Rule authorized_by_privileged_group: the API server's superuser authorizer allows
    every review for system:masters, so the webhook makes none; any other group is asked."""
    root = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
    reviewer = FakeAccessReviewer()
    handler = authorizing(reviewer)
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    assert handler(request(sts, user=root))["response"]["allowed"] is True
    assert reviewer.asked == []
    lookalikes = [
        {**root, "groups": ["system:masters-ish", "system:authenticated"]},
        {**root, "groups": "system:masters"},
        {"groups": ["system:masters"]},  # no username: unverifiable, as before
    ]
    for user in lookalikes:
        assert handler(request(MANAGED, user=user))["response"]["allowed"] is False
    assert len(reviewer.asked) == 2


@pytest.mark.parametrize(
    ("obj", "outcomes", "code"),
    [
        (MANAGED, [{"status": {"allowed": True}}] * 2, None),
        (MANAGED, [{"status": {"allowed": True, "denied": True}}], 403),
        (MANAGED, [ReviewError("API server said 500 Internal Server Error")], 503),
        (MANAGED, [], 503),
        (with_spec(MANAGED, deploymentKind="StatefulSet"), [{"status": {"allowed": True}}], 503),
    ],
    ids=["allowed", "denied-wins", "review-error", "not-made", "second-not-made"],
)
def test_authorization_answer_is_a_pure_function_of_the_outcomes(
    obj: dict[str, Any], outcomes: list[Any], code: int | None
) -> None:
    """Rule: allowed only when every needed review allowed (a ``denied`` answer wins
    over ``allowed``); a review that failed, or was never made, fails closed (503)."""
    req = request(obj)
    allowed = validate_cachebackend(req)
    plan = review_plan(req)
    assert plan is not None
    answer = authorization_answer(req, allowed, plan, outcomes)["response"]
    if code is None:
        assert answer is allowed["response"]
    else:
        assert answer["allowed"] is False
        assert answer["status"]["code"] == code


def test_no_plan_for_writes_that_need_no_review() -> None:
    """Rule: system:masters, subresources and updates that leave the pod template and
    the engine-shaping fields alone need no review at all."""
    root = {"username": "admin", "groups": ["system:masters"]}
    assert review_plan(request(MANAGED, user=root)) is None
    assert review_plan(request(HOST_ONLY, HOST_ONLY)) is None
    assert review_plan(request(with_spec(MANAGED, replicas=2), MANAGED)) is None
    status_write = request(MANAGED)
    status_write.raw["subResource"] = "status"
    assert review_plan(status_write) is None
    plan = review_plan(request(with_spec(MANAGED, deploymentKind="StatefulSet")))
    assert plan is not None
    assert plan.needed == (DEPLOYMENTS, STATEFULSETS, PODS)


# ----------------------------------------------- changes that open a tier or move data

SELECTED: dict[str, Any] = with_spec(MANAGED, engineSelector={"matchLabels": {"app": "vllm"}})
EXTERNAL: dict[str, Any] = with_spec(
    SELECTED,
    remoteStorage={
        "provider": "LMCacheServer", "ownership": "External", "endpoint": "lm://cache.example.com:65432"
    },
)  # fmt: skip
REDIS: dict[str, Any] = with_spec(
    SELECTED, runtime="SGLang", remoteStorage={"provider": "Redis", "ownership": "Managed"}
)


def annotated(obj: dict[str, Any], **annotations: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"] = {**(out["metadata"].get("annotations") or {}), **annotations}
    return out


CONSENT = "inferencecache.io/allowed-consumer-namespaces"
SKIP = "inferencecache.io/skip-network-policy"


def pods_needed_for(after: dict[str, Any], before: dict[str, Any]) -> str | None:
    """The field a ``create pods`` denial names for this update; None when free."""
    if PODS not in required_access("UPDATE", after, before):
        return None
    return shaping_field(after, before, PODS)


@pytest.mark.parametrize(
    ("before", "after", "field"),
    [
        (REDIS, annotated(REDIS, **{CONSENT: "theirs"}), f"metadata.annotations[{CONSENT}]"),
        (
            annotated(REDIS, **{CONSENT: "team-b"}),
            annotated(REDIS, **{CONSENT: "team-b,theirs"}),
            f"metadata.annotations[{CONSENT}]",
        ),
        (SELECTED, annotated(SELECTED, **{SKIP: "true"}), f"metadata.annotations[{SKIP}]"),
        (
            annotated(SELECTED, **{SKIP: "false"}),
            annotated(SELECTED, **{SKIP: "true"}),
            f"metadata.annotations[{SKIP}]",
        ),
        (SELECTED, EXTERNAL, "spec.remoteStorage.ownership"),
        (
            with_spec(REDIS, remoteStorage={"provider": "Redis", "ownership": "Managed"}),
            with_spec(
                REDIS,
                remoteStorage={
                    "provider": "Redis",
                    "ownership": "External",
                    "endpoint": "evil.example.com:6379",
                },
            ),
            "spec.remoteStorage.ownership",
        ),
        (
            EXTERNAL,
            with_spec(
                EXTERNAL,
                remoteStorage={
                    "provider": "LMCacheServer",
                    "ownership": "External",
                    "endpoint": "evil.example.com:1",
                },
            ),
            "spec.remoteStorage.endpoint",
        ),
        (
            SELECTED,
            with_spec(SELECTED, remoteStorage={"provider": "Mooncake", "ownership": "Managed"}),
            "spec.remoteStorage.provider",
        ),
        (SELECTED, with_spec(SELECTED, allowCrossNamespace=True), "spec.allowCrossNamespace"),
        (EXTERNAL, with_spec(EXTERNAL, allowCrossNamespace=True), "spec.allowCrossNamespace"),
        # A backend that selects no pod yet is judged on what it would put in one.
        (
            MANAGED,
            with_spec(MANAGED, remoteStorage={"provider": "Mooncake", "ownership": "Managed"}),
            "spec.remoteStorage.provider",
        ),
    ],
)
def test_changes_that_open_a_tier_or_move_its_data_need_create_pods(
    before: dict[str, Any], after: dict[str, Any], field: str
) -> None:
    """The one rule (engine_access_change): consent gaining a namespace, skip-network-
    policy turning on, provider / ownership / endpoint changing, allowCrossNamespace
    turning on — each needs ``create pods``, and the 403 names it."""
    assert pods_needed_for(after, before) == field
    resp = authorizing(FakeAccessReviewer({"deployments"}))(request(after, before))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert resp["status"]["details"]["causes"][0]["field"] == field


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (annotated(REDIS, **{CONSENT: "team-b,team-c"}), annotated(REDIS, **{CONSENT: "team-b"})),
        (annotated(REDIS, **{CONSENT: "team-b"}), REDIS),
        (annotated(REDIS, **{CONSENT: "team-b"}), annotated(REDIS, **{CONSENT: "team-b, team-b"})),
        (annotated(SELECTED, **{SKIP: "true"}), annotated(SELECTED, **{SKIP: "false"})),
        (annotated(SELECTED, **{SKIP: "true"}), SELECTED),
        (SELECTED, annotated(SELECTED, **{"team": "a"})),
        (with_spec(SELECTED, allowCrossNamespace=True), SELECTED),
        (SELECTED, with_spec(SELECTED, replicas=3)),
        (EXTERNAL, copy.deepcopy(EXTERNAL)),
    ],
)
def test_narrowing_a_tier_or_leaving_the_engines_alone_is_free(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    """Narrowing consent, isolation back on, allowCrossNamespace off, a label or a scale:
    nothing more reaches the tier and the engines are wired as before."""
    labelled = copy.deepcopy(after)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert pods_needed_for(labelled, before) is None


def test_a_denial_for_a_removed_field_names_that_field() -> None:
    """A field removed is named as itself, not as spec.engineSelector."""
    image = with_spec(SELECTED, lmCache={"workerImage": "registry.example/w:1"})
    assert pods_needed_for(SELECTED, image) == "spec.lmCache.workerImage"
    overrides = with_spec(
        SELECTED, integration={"engineOverrides": {"env": [{"name": "A", "value": "b"}]}}
    )
    assert pods_needed_for(SELECTED, overrides) == "spec.integration.engineOverrides"
    assert pods_needed_for(HOST_ONLY, MANAGED) == "spec.remoteStorage.provider"


def test_any_change_to_what_the_sample_engine_pod_gets_needs_create_pods() -> None:
    """One comparison rather than a field list: a field that no list names (the LMCache
    chunk size, which becomes engine env) still counts, because the sample engine pod
    is wired differently."""
    chunk = with_spec(SELECTED, lmCache={"chunkSizeTokens": 512})
    assert pods_needed_for(chunk, SELECTED) == "spec.lmCache"


def test_a_sample_the_wiring_refuses_makes_any_spec_change_count() -> None:
    """Fail closed: when the sample engine pod cannot be wired (here an External endpoint
    the wiring refuses), the comparison shows nothing, so any spec change needs
    ``create pods``; a label edit still does not."""
    broken = with_spec(
        SELECTED,
        remoteStorage={"provider": "Redis", "ownership": "External", "endpoint": "redis://h:1"},
    )
    assert pods_needed_for(with_spec(broken, replicas=2), broken) == "spec.replicas"
    assert pods_needed_for(annotated(broken, note="x"), broken) is None
