"""The fast JSON diff is a correct RFC 6902 patch, whatever changed.

Every patch is applied with jsonpatch (an independent RFC 6902 implementation) and
must give exactly the target document; the webhooks' own patches must give the same
objects jsonpatch's minimal patches gave (the decisions are unchanged).
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from shared import json_diff
from shared.defaulting import default_cachebackend
from shared.json_diff import apply, diff, same
from shared.pod_wiring import wire_pod
from shared.runtime_adapters.base import InjectContext
from tests.fakes import mutate_pod
from tests.samples import ROOT
from webhook_svc.admission_review import parse_review
from webhook_svc.backend_files import load_backends
from webhook_svc.cachebackend_admission import mutate_cachebackend

PAIRS: list[tuple[Any, Any]] = [
    ({}, {}),
    ({"a": 1}, {"a": 1, "b": {"c": [1, 2]}}),
    ({"a": 1, "b": 2}, {"b": 2}),  # removal
    ({"a": 1}, {"a": True}),  # bool is not int
    ({"a": 1}, {"a": 1.0}),  # float is not int
    ({"a": [1, 2, 3]}, {"a": [1, 2, 3, 4, 5]}),  # append
    ({"a": [1, 2, 3]}, {"a": [0, 1, 2, 3]}),  # insert in front
    ({"a": [1, 2, 3]}, {"a": [1, 3]}),  # shrink
    ({"a": [{"x": 1}, {"y": 2}]}, {"a": [{"x": 1, "z": 0}, {"y": 3}]}),  # edits in place
    ({"a/b": 1, "c~d": {"e": 1}}, {"a/b": 2, "c~d": {"e": 2}, "~/": 3}),  # escaping
    ({"a": {"b": 1}}, {"a": [1]}),  # type change
    ({"a": None}, {"a": {}}),
    ([1, 2], {"x": 1}),  # root replaced
    ({"": {"": 1}}, {"": {"": 2}}),  # empty keys
]


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_diff_applies_to_exactly_the_target(before: Any, after: Any) -> None:
    patch = diff(before, after)
    assert same(jsonpatch.apply_patch(copy.deepcopy(before), patch), after)
    assert same(apply(copy.deepcopy(before), patch), after)
    if same(before, after):
        assert patch == []


def test_apply_refuses_what_it_does_not_implement() -> None:
    with pytest.raises(json_diff.UnsupportedOpError):
        apply({"a": 1}, [{"op": "move", "from": "/a", "path": "/b"}])
    with pytest.raises(LookupError):
        apply({"a": []}, [{"op": "add", "path": "/a/3", "value": 1}])
    with pytest.raises(LookupError):
        apply({"a": 1}, [{"op": "replace", "path": "/b", "value": 1}])


EXAMPLES = sorted((ROOT / "examples" / "admission").glob("*.json"))
CTX = InjectContext(kvevent_subscriber_image="ghcr.io/inference-cache/kvevent-subscriber:0.1.0")


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_webhook_patches_give_exactly_the_decided_object(example: Path) -> None:
    """The decision is the object the API server ends up with: the defaulted
    CacheBackend, the wired pod. The fast patch, applied by jsonpatch, gives it."""
    review = json.loads(example.read_text())
    request = review["request"]
    obj = request.get("object")
    if not isinstance(obj, dict) or request.get("operation") not in ("CREATE", "UPDATE"):
        response = mutate_cachebackend(parse_review(copy.deepcopy(review)))
        assert "patch" not in response["response"]  # nothing to patch on DELETE
        return
    if obj.get("kind") == "Pod":
        namespace = request.get("namespace") or "default"
        backends = load_backends(ROOT / "manifests" / "samples", default_namespace=namespace)
        response = mutate_pod(parse_review(copy.deepcopy(review)), lambda ns: backends, CTX)[0]
        decided = wire_pod(copy.deepcopy(obj), backends, CTX, namespace=namespace).pod
    else:
        response = mutate_cachebackend(parse_review(copy.deepcopy(review)))
        decided = default_cachebackend(obj, request["operation"], request.get("oldObject"))
    encoded = response["response"].get("patch")
    patch = json.loads(base64.b64decode(encoded)) if encoded else []
    assert same(jsonpatch.apply_patch(copy.deepcopy(obj), patch), decided)
