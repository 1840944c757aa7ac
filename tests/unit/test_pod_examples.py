"""The Pod replay files in examples/admission/ behave as their README table says."""

from __future__ import annotations

import base64
import json

import pytest

from shared import constants as c
from shared.runtime_adapters.base import InjectContext
from tests.samples import ROOT, SAMPLES_DIR
from webhook_svc.admission_review import parse_review
from webhook_svc.backend_files import load_backends
from webhook_svc.pod_admission import mutate_pod

EXAMPLES = ROOT / "examples" / "admission"
BACKENDS = load_backends(SAMPLES_DIR)

# file -> (outcome, reason, backend annotation or None)
EXPECTED = {
    "pod-vllm-host-only.json": ("injected", "injected", "default/vllm-host-only"),
    "pod-sglang-lmcache-mp.json": ("injected", "injected", "default/sglang-host-only"),
    "pod-sglang-hicache.json": ("injected", "injected", "default/sglang-hicache"),
    "pod-no-match-fail-open.json": ("fail_open", "no_match", None),
    "pod-skip-inject.json": ("skipped", "skip_inject_annotation", None),
}


def test_every_pod_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("pod-*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pod_example_replays_as_documented(name: str) -> None:
    req = parse_review(json.loads((EXAMPLES / name).read_text()))
    review, outcome, reason = mutate_pod(
        req,
        lambda ns: [b for b in BACKENDS if b["metadata"].get("namespace", "default") == ns],
        InjectContext(),
    )
    assert (outcome, reason) == EXPECTED[name][:2]
    assert review["response"]["allowed"] is True
    patch = json.dumps(review["response"].get("patch", ""))
    backend = EXPECTED[name][2]
    if backend:
        ops = json.loads(base64.b64decode(review["response"]["patch"]))
        assert any(
            op.get("value") == backend
            or (
                isinstance(op.get("value"), dict)
                and op["value"].get(c.ANNOTATION_INJECTED_BY) == backend
            )
            for op in ops
        ), ops
    else:
        assert c.ANNOTATION_INJECTED_BY not in patch
