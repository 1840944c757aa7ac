"""Mutate_pod: AdmissionReview handling of the Pod webhook; always allowed, fail-open.

Driven through the route's one function, ``admit_pod``: the request is classified
once (``classify_pod``), the namespace its ``namespace_to_list`` names is listed (here
through a scripted lister, which may raise), then the pure ``answer_pod`` judges the
same classified request with what the list returned, or with the exception it raised."""

from __future__ import annotations

import base64
import copy
import json
import logging
from typing import Any

import jsonpatch
import pytest

from shared import constants as c
from shared import json_diff
from tests.builders import CTX, NS, admission_review, stale_annotations
from tests.builders import backend as make_backend
from tests.builders import pod as make_pod
from tests.fakes import mutate_pod
from webhook_svc import pod_admission
from webhook_svc.admission_review import AdmissionRequest, parse_review


def request(obj: Any, operation: str = "CREATE", namespace: str = NS) -> AdmissionRequest:
    review = admission_review(obj, operation=operation, namespace=namespace, uid="req-1", name="")
    return parse_review(review)


class Lister:
    """A CacheBackend source over fixed backends that records the namespaces asked."""

    def __init__(self, backends: tuple[dict[str, Any], ...]) -> None:
        self.backends = backends
        self.calls: list[str] = []

    def __call__(self, namespace: str) -> list[dict[str, Any]]:
        self.calls.append(namespace)
        return [copy.deepcopy(b) for b in self.backends]


def lister(*backends: dict[str, Any]) -> Lister:
    return Lister(backends)


def patch_of(review: dict[str, Any]) -> list[dict[str, Any]]:
    response = review["response"]
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


def assert_allowed(review: dict[str, Any]) -> None:
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == "req-1"
    assert review["response"]["allowed"] is True


def test_create_wires_the_pod_with_a_minimal_json_patch() -> None:
    pod = make_pod()
    review, outcome, reason = mutate_pod(request(pod), lister(make_backend()), CTX)
    assert_allowed(review)
    assert (outcome, reason) == ("injected", "injected")
    ops = patch_of(review)
    assert ops
    # Never a whole-object or whole-spec replace.
    assert all(op["path"] not in ("", "/spec", "/metadata", "/spec/containers") for op in ops)
    wired = jsonpatch.apply_patch(pod, ops)
    assert wired["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY] == f"{NS}/cache"
    assert any(ct["name"] == "kvevent-subscriber" for ct in wired["spec"]["containers"])


def test_re_admission_of_a_wired_pod_has_no_patch() -> None:
    pod = make_pod()
    review, _, _ = mutate_pod(request(pod), lister(make_backend()), CTX)
    wired = jsonpatch.apply_patch(pod, patch_of(review))
    again, outcome, _ = mutate_pod(request(wired), lister(make_backend()), CTX)
    assert_allowed(again)
    assert outcome == "injected"
    assert "patch" not in again["response"]


def test_lists_backends_of_the_request_namespace() -> None:
    list_backends = lister(make_backend())
    mutate_pod(request(make_pod(namespace=""), namespace=NS), list_backends, CTX)
    assert list_backends.calls == [NS]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT", ""])
def test_only_create_wires(operation: str) -> None:
    list_backends = lister(make_backend())
    review, outcome, reason = mutate_pod(request(make_pod(), operation), list_backends, CTX)
    assert_allowed(review)
    assert "patch" not in review["response"]
    assert (outcome, reason) == ("skipped", "operation_not_create")
    assert list_backends.calls == []


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "a string",
        {"kind": "Deployment", "spec": {}},
        {"kind": "Pod", "metadata": [], "spec": {}},
    ],
    ids=["missing", "not-object", "wrong-kind", "bad-metadata"],
)
def test_decode_failure_fails_open_without_patch(obj: Any) -> None:
    review, outcome, reason = mutate_pod(request(obj), lister(make_backend()), CTX)
    assert_allowed(review)
    assert "patch" not in review["response"]
    assert (outcome, reason) == ("fail_open", "decode_error")


class WeirdError(Exception):
    pass


def refused(namespace: str) -> list[dict[str, Any]]:
    """A backend lister whose API server refuses the connection."""
    raise ConnectionError("refused")


@pytest.mark.parametrize("error", [RuntimeError("apiserver down"), TimeoutError(), WeirdError("x")])
def test_list_error_fails_open_and_strips_stale_annotations(error: Exception) -> None:
    def broken(namespace: str) -> list[dict[str, Any]]:
        raise error

    pod = make_pod(annotations=stale_annotations())
    review, outcome, reason = mutate_pod(request(pod), broken, CTX)
    assert_allowed(review)
    assert (outcome, reason) == ("fail_open", "list_error")
    patched = jsonpatch.apply_patch(pod, patch_of(review))
    assert patched["spec"] == pod["spec"]
    assert patched["metadata"]["annotations"] == {"team/keep": "me"}


def test_list_error_without_stale_annotations_has_no_patch() -> None:
    review, _, reason = mutate_pod(request(make_pod()), refused, CTX)
    assert reason == "list_error"
    assert "patch" not in review["response"]


def test_no_match_strips_stale_annotations_through_the_patch() -> None:
    pod = make_pod(labels={"app": "web"}, annotations=stale_annotations())
    review, outcome, reason = mutate_pod(request(pod), lister(make_backend()), CTX)
    assert (outcome, reason) == ("fail_open", "no_match")
    ops = patch_of(review)
    assert {op["op"] for op in ops} == {"remove"}
    assert jsonpatch.apply_patch(pod, ops)["metadata"]["annotations"] == {"team/keep": "me"}


def test_adapter_rejection_is_allowed_unwired() -> None:
    pod = make_pod({"name": "a", "image": "x"}, {"name": "b", "image": "y"})
    review, outcome, reason = mutate_pod(request(pod), lister(make_backend()), CTX)
    assert_allowed(review)
    assert (outcome, reason) == ("fail_open", "adapter_rejected")
    assert "patch" not in review["response"]


def test_internal_error_fails_open_without_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise ValueError("bug")

    monkeypatch.setattr(pod_admission, "wire_facts", boom)
    review, outcome, reason = mutate_pod(request(make_pod()), lister(make_backend()), CTX)
    assert_allowed(review)
    assert "patch" not in review["response"]
    assert (outcome, reason) == ("fail_open", "internal_error")


def test_encode_error_fails_open_without_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any) -> Any:
        raise TypeError("not serialisable")

    monkeypatch.setattr(pod_admission, "verified_patch", boom)
    review, outcome, reason = mutate_pod(request(make_pod()), lister(make_backend()), CTX)
    assert_allowed(review)
    assert "patch" not in review["response"]
    assert (outcome, reason) == ("fail_open", "encode_error")


def test_skip_inject_is_allowed_with_marker_patch() -> None:
    pod = make_pod(annotations={c.ANNOTATION_SKIP_INJECT: "true"})
    review, outcome, reason = mutate_pod(request(pod), lister(make_backend()), CTX)
    assert (outcome, reason) == ("skipped", "skip_inject_annotation")
    patched = jsonpatch.apply_patch(pod, patch_of(review))
    assert patched["metadata"]["annotations"][c.ANNOTATION_INJECT_SKIPPED] == c.INJECT_SKIPPED_VALUE


def test_one_structured_log_line_per_admission(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="icache.webhook.pod")
    mutate_pod(request(make_pod()), lister(make_backend()), CTX)
    records = [r for r in caplog.records if r.name == "icache.webhook.pod"]
    assert len(records) == 1
    record = records[0]
    assert record.__dict__["outcome"] == "injected"
    assert record.__dict__["reason"] == "injected"
    assert record.__dict__["namespace"] == NS
    assert record.__dict__["pod_generate_name"] == "engine-"
    assert record.__dict__["backend"] == f"{NS}/cache"
    assert isinstance(record.__dict__["duration_ms"], float)


def test_error_reasons_log_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    def broken(namespace: str) -> list[dict[str, Any]]:
        raise RuntimeError("down")

    caplog.set_level(logging.INFO, logger="icache.webhook.pod")
    mutate_pod(request(make_pod()), refused, CTX)
    (record,) = [r for r in caplog.records if r.name == "icache.webhook.pod"]
    assert record.levelno == logging.WARNING
    assert record.__dict__["reason"] == "list_error"


def test_every_returned_reason_is_in_the_published_vocabulary() -> None:
    from shared import pod_wiring

    declared = {v for k, v in vars(pod_wiring).items() if k.startswith("REASON_")}
    declared |= {v for k, v in vars(pod_admission).items() if k.startswith("REASON_")}
    assert declared == set(pod_admission.ADMISSION_REASONS)
    assert len(pod_admission.ADMISSION_REASONS) == len(set(pod_admission.ADMISSION_REASONS))


def test_skip_inject_is_decided_before_listing_backends() -> None:
    # Spec: a truthy skip-inject "returns Allowed, skips engine wiring ... and stamps
    # inferencecache.io/inject-skipped" — it needs no backend, so a list error does not
    # turn the explicit opt-out into an unmarked fail-open.
    pod = make_pod(annotations={c.ANNOTATION_SKIP_INJECT: "true"})
    review, outcome, reason = mutate_pod(request(pod), refused, CTX)
    assert (outcome, reason) == ("skipped", "skip_inject_annotation")
    patched = jsonpatch.apply_patch(pod, patch_of(review))
    assert patched["metadata"]["annotations"][c.ANNOTATION_INJECT_SKIPPED] == c.INJECT_SKIPPED_VALUE


def test_a_pod_without_any_namespace_is_in_default() -> None:
    list_backends = lister(make_backend(namespace="default"))
    review, outcome, _ = mutate_pod(
        request(make_pod(namespace=""), namespace=""), list_backends, CTX
    )
    assert list_backends.calls == ["default"]
    assert outcome == "injected"
    wired = jsonpatch.apply_patch(make_pod(namespace=""), patch_of(review))
    assert wired["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY] == "default/cache"


def test_a_patch_that_does_not_reproduce_the_pod_falls_back_to_field_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Neither candidate reproduces the wired pod: the fast diff and jsonpatch's search.
    monkeypatch.setattr(json_diff, "diff", lambda before, after: [])
    monkeypatch.setattr(jsonpatch, "make_patch", lambda before, after: jsonpatch.JsonPatch([]))
    pod = make_pod()
    review, outcome, _ = mutate_pod(request(pod), lister(make_backend()), CTX)
    assert outcome == "injected"
    ops = patch_of(review)
    assert {op["path"] for op in ops} == {
        "/metadata/annotations",
        "/metadata/labels",
        "/spec/containers",
    }
    wired = jsonpatch.apply_patch(pod, ops)
    monkeypatch.undo()
    again, _, _ = mutate_pod(request(wired), lister(make_backend()), CTX)
    assert "patch" not in again["response"]


def test_the_pod_patch_is_built_and_applied_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The minimal patch is verified by applying it to a copy of the pod (a wrong patch
    # would wire the pod to something nobody rendered): once per admission, not once
    # per layer that builds it.
    applied: list[int] = []
    real_apply = json_diff.apply

    def counting_apply(doc: Any, patch: list[dict[str, Any]]) -> Any:
        applied.append(len(patch))
        return real_apply(doc, patch)

    monkeypatch.setattr(json_diff, "apply", counting_apply)
    review, outcome, _ = mutate_pod(request(make_pod()), lister(make_backend()), CTX)
    assert outcome == "injected"
    assert len(applied) == 1
    assert applied == [len(patch_of(review))]


def test_field_level_patch_round_trips() -> None:
    before = {
        "apiVersion": "v1",
        "metadata": {"annotations": {"a/b": "1"}, "labels": {"x": "y"}},
        "spec": {"containers": [{"name": "c"}], "volumes": []},
    }
    after = {
        "apiVersion": "v1",
        "metadata": {"labels": {"x": "y"}},
        "spec": {"containers": [{"name": "c", "args": ["x"]}], "hostNetwork": True},
    }
    ops = json_diff.field_level_patch(before, after)
    assert jsonpatch.apply_patch(before, ops) == after
    assert all(op["path"] not in ("", "/spec", "/metadata") for op in ops)


@pytest.mark.parametrize(
    ("obj", "operation", "backends", "expected"),
    [
        (make_pod(), "CREATE", [make_backend()], ("injected", "injected")),
        (make_pod(), "UPDATE", [make_backend()], ("skipped", "operation_not_create")),
        ("a string", "CREATE", [make_backend()], ("fail_open", "decode_error")),
        (make_pod(), "CREATE", [], ("fail_open", "no_match")),
        (
            make_pod(annotations={c.ANNOTATION_SKIP_INJECT: "true"}),
            "CREATE",
            [make_backend()],
            ("skipped", "skip_inject_annotation"),
        ),
    ],
    ids=["injected", "not-create", "decode-error", "no-match", "skip-inject"],
)
def test_the_decision_is_in_the_response_audit_annotations(
    obj: Any, operation: str, backends: list[dict[str, Any]], expected: tuple[str, str]
) -> None:
    """The response says why, so a fail-open for one reason cannot
    pass as another over HTTP. auditAnnotations (the API server records them in the
    audit log, prefixed with the webhook name) carry the outcome and reason the
    metric counts and the log line states."""
    review, outcome, reason = mutate_pod(request(obj, operation), lister(*backends), CTX)
    assert_allowed(review)
    assert (outcome, reason) == expected
    assert review["response"]["auditAnnotations"] == {"outcome": outcome, "reason": reason}
