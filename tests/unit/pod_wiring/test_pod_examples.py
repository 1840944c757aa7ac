"""The Pod replay files in examples/admission/ behave as their README table says."""

from __future__ import annotations

import base64
import json

import pytest

from shared import constants as c
from shared.runtime_adapters.base import InjectContext
from tests.fakes import mutate_pod
from tests.samples import EXAMPLES_DIR as EXAMPLES
from tests.samples import EXAMPLES_SUBSCRIBER_IMAGE as SUBSCRIBER_IMAGE
from tests.samples import EXPECTED_POD_EXAMPLES as EXPECTED
from tests.samples import SAMPLES_DIR
from webhook_svc.admission_review import parse_review
from webhook_svc.backend_files import load_backends

BACKENDS = load_backends(SAMPLES_DIR)

# Without the image, events-only appends nothing and is a fail-open; the rest is unchanged.
WITHOUT_IMAGE = {"pod-vllm-events-only.json": ("fail_open", "events_only_no_subscriber", None)}


def test_every_pod_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("pod-*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("image", [SUBSCRIBER_IMAGE, None], ids=["image", "no-image"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pod_example_replays_as_documented(name: str, image: str | None) -> None:
    req = parse_review(json.loads((EXAMPLES / name).read_text()))
    review, outcome, reason = mutate_pod(
        req,
        lambda ns: [b for b in BACKENDS if b["metadata"].get("namespace", "default") == ns],
        InjectContext(kvevent_subscriber_image=image),
    )
    expected = EXPECTED[name] if image else WITHOUT_IMAGE.get(name, EXPECTED[name])
    assert (outcome, reason) == expected[:2]
    assert review["response"]["allowed"] is True
    patch = json.dumps(review["response"].get("patch", ""))
    backend = expected[2]
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
