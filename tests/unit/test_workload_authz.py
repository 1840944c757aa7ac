"""Issue 10 item 6: a CacheBackend is as powerful as a Pod create in its namespace, so
the validating webhook checks (SubjectAccessReview) that its writer may create the
workload it shapes. The decisions, pure; the real API server test is
tests/integration/test_workload_authz.py."""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import pytest

from tests.fakes import FakeKube
from webhook_svc.admission_review import parse_review
from webhook_svc.cachebackend_admission import validate_cachebackend
from webhook_svc.workload_authz import (
    DEPLOYMENTS,
    STATEFULSETS,
    ApiAccessReviewer,
    ReviewError,
    access_review,
    authorize_workload,
    authorize_workload_async,
    authorizing,
    required_access,
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


def test_create_of_a_managed_backend_needs_create_deployments() -> None:
    assert required_access("CREATE", MANAGED, None) == [DEPLOYMENTS]
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    assert required_access("CREATE", sts, None) == [DEPLOYMENTS, STATEFULSETS]


def test_backends_without_a_workload_need_nothing() -> None:
    assert required_access("CREATE", HOST_ONLY, None) == []
    external = with_spec(
        MANAGED,
        remoteStorage={"provider": "LMCacheServer", "ownership": "External", "endpoint": "h:1"},
    )
    assert required_access("CREATE", external, None) == []
    assert required_access("DELETE", MANAGED, None) == []


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
        with_spec(MANAGED, remoteStorage={"provider": "Mooncake", "ownership": "Managed"}),
    ):
        assert required_access("UPDATE", changed, MANAGED) == [DEPLOYMENTS]
    # Host-only → managed makes a workload appear.
    assert required_access("UPDATE", MANAGED, HOST_ONLY) == [DEPLOYMENTS]
    # Managed → host-only makes it go: nothing to create.
    assert required_access("UPDATE", HOST_ONLY, MANAGED) == []


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


class Reviewer:
    def __init__(self, allowed: set[str] | None = None, error: bool = False) -> None:
        self.allowed = allowed or set()
        self.error = error
        self.asked: list[dict[str, Any]] = []

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body)
        if self.error:
            raise ReviewError("API server said 503 Service Unavailable")
        resource = body["spec"]["resourceAttributes"]["resource"]
        return {"status": {"allowed": resource in self.allowed}}


def review(obj: dict[str, Any], old: dict[str, Any] | None = None, user: Any = USER) -> Any:
    request: dict[str, Any] = {
        "uid": "r-1",
        "operation": "UPDATE" if old else "CREATE",
        "namespace": "team-a",
        "name": "cb",
        "object": obj,
        "oldObject": old,
    }
    if user is not None:
        request["userInfo"] = user
    return parse_review({"request": request})


def test_a_user_who_may_not_create_deployments_is_denied_with_a_field_scoped_403() -> None:
    handler = authorizing(validate_cachebackend, Reviewer())
    resp = handler(review(MANAGED))["response"]
    assert resp["allowed"] is False
    status = resp["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert 'user "alice" cannot create deployments.apps in namespace "team-a"' in status["message"]
    assert status["details"]["causes"][0]["field"] == "spec.remoteStorage"


def test_a_user_who_may_is_allowed_and_nothing_is_asked_when_nothing_is_shaped() -> None:
    reviewer = Reviewer({"deployments"})
    handler = authorizing(validate_cachebackend, reviewer)
    assert handler(review(MANAGED))["response"]["allowed"] is True
    assert len(reviewer.asked) == 1
    reviewer.asked.clear()
    assert handler(review(HOST_ONLY))["response"]["allowed"] is True
    assert handler(review(with_spec(MANAGED, replicas=2), MANAGED))["response"]["allowed"]
    assert reviewer.asked == []
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    denied = handler(review(sts))["response"]
    assert denied["allowed"] is False
    assert "statefulsets.apps" in denied["status"]["message"]


@pytest.mark.parametrize(
    ("reviewer", "user"), [(Reviewer(error=True), USER), (Reviewer({"deployments"}), None)]
)
def test_a_review_that_cannot_be_made_fails_closed(reviewer: Reviewer, user: Any) -> None:
    resp = authorizing(validate_cachebackend, reviewer)(review(MANAGED, user=user))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 503
    assert "could not verify" in resp["status"]["message"]


def test_invalid_objects_are_denied_by_validation_before_any_review() -> None:
    reviewer = Reviewer({"deployments"})
    bad = with_spec(MANAGED, remoteStorage={"provider": "LMCacheServer", "ownership": "External"})
    resp = authorizing(validate_cachebackend, reviewer)(review(bad))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    assert reviewer.asked == []


def test_without_a_reviewer_embedded_mode_is_unchanged() -> None:
    assert authorizing(validate_cachebackend, None) is validate_cachebackend


def test_a_review_past_its_budget_is_a_review_error_not_a_hang() -> None:
    """The validating webhook's timeoutSeconds is 10: a stalled SubjectAccessReview
    gives up on its wall-clock budget (and so fails closed) instead of riding the
    client library's read retries past the API server's deadline."""
    release = threading.Event()

    class Stalled(ApiAccessReviewer):
        def _review_now(self, body: dict[str, Any]) -> dict[str, Any]:
            release.wait(30)
            return {"status": {"allowed": True, "denied": False, "reason": ""}}

    try:
        with pytest.raises(ReviewError, match=r"within 0\.2 s"):
            Stalled(FakeKube(), budget=0.2).review({})
    finally:
        release.set()


def test_authorized_by_privileged_group_asks_nothing_for_system_masters() -> None:
    """Rule authorized_by_privileged_group: the API server's superuser authorizer allows
    every review for system:masters, so the webhook makes none; any other group is asked."""
    root = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
    reviewer = Reviewer()
    handler = authorizing(validate_cachebackend, reviewer)
    sts = with_spec(MANAGED, deploymentKind="StatefulSet")
    assert handler(review(sts, user=root))["response"]["allowed"] is True
    assert reviewer.asked == []
    lookalikes = [
        {**root, "groups": ["system:masters-ish", "system:authenticated"]},
        {**root, "groups": "system:masters"},
        {"groups": ["system:masters"]},  # no username: unverifiable, as before
    ]
    for user in lookalikes:
        assert handler(review(MANAGED, user=user))["response"]["allowed"] is False
    assert len(reviewer.asked) == 2


class AsyncReviewer:
    """The same answers as ``Reviewer``, awaited."""

    def __init__(self, sync: Reviewer) -> None:
        self.sync = sync

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return self.sync.review(body)


@pytest.mark.parametrize(
    ("obj", "allowed", "error", "user"),
    [
        (MANAGED, set(), False, USER),
        (MANAGED, {"deployments"}, False, USER),
        (with_spec(MANAGED, deploymentKind="StatefulSet"), {"deployments"}, False, USER),
        (
            with_spec(MANAGED, deploymentKind="StatefulSet"),
            {"deployments", "statefulsets"},
            False,
            USER,
        ),
        (MANAGED, set(), True, USER),
        (MANAGED, set(), False, {"groups": ["team-a"]}),
        (HOST_ONLY, set(), False, USER),
    ],
    ids=[
        "denied",
        "allowed",
        "sts-denied",
        "sts-allowed",
        "review-error",
        "no-username",
        "no-workload",
    ],
)
def test_the_event_loop_reviewer_decides_exactly_as_the_threaded_one(
    obj: dict[str, Any], allowed: set[str], error: bool, user: Any
) -> None:
    """authorization_steps is the one decision: driven by a blocking reviewer
    (authorize_workload) or an awaited one (authorize_workload_async), same answer,
    same reviews asked in the same order."""
    req = review(obj, user=user)
    allow_response = validate_cachebackend(req)
    blocking, awaited = Reviewer(allowed, error), Reviewer(allowed, error)
    expected = authorize_workload(req, blocking, allow_response)
    got = asyncio.run(authorize_workload_async(req, AsyncReviewer(awaited), allow_response))
    assert got == expected
    assert awaited.asked == blocking.asked
