"""Property-based fuzzing of the three admission routes (hypothesis).

Each case takes a valid AdmissionReview from examples/admission (CacheBackends and
Pods) and mutates it structurally: values replaced by other JSON types, keys deleted
or added, subtrees wrapped in deep nesting, edge-case numbers (1e400, 5000 digits),
strings grown large or filled with any Unicode (lone surrogates included), the uid
changed, bytes truncated. Whatever comes
in, the answer is

* 200 with an AdmissionReview whose response echoes the request uid, or
* a 4xx whose JSON ``error`` names the problem;

never a 5xx, and the Pod route always answers ``allowed: true``.

`make test` runs a fixed-seed slice (derandomized, ICACHE_FUZZ_EXAMPLES unset: 150
cases per route). `make fuzz` runs ICACHE_FUZZ_EXAMPLES=100000 cases, split over the
routes, with a random seed; it drives the ASGI app in-process through Starlette's
TestClient (the same app object `icache webhook` serves) for throughput.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.runtime_adapters.base import InjectContext
from tests.samples import ROOT, SAMPLES_DIR
from webhook_svc.app import PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB, create_app
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource

MAX_BODY = 256 * 1024
_TARGET = os.environ.get("ICACHE_FUZZ_EXAMPLES")
_ROUTES = (PATH_MUTATE_CB, PATH_VALIDATE_CB, PATH_MUTATE_POD)
FUZZ = settings(
    # The fixed slice is the same every run; `make fuzz` explores with a fresh seed.
    derandomize=_TARGET is None,
    max_examples=150 if _TARGET is None else -(-int(_TARGET) // len(_ROUTES)),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
CASES: dict[str, int] = {}


def _examples() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cachebackends: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for path in sorted((ROOT / "examples" / "admission").glob("*.json")):
        review = json.loads(path.read_text())
        kind = review["request"].get("kind", {}).get("kind")
        (pods if kind == "Pod" else cachebackends).append(review)
    return cachebackends, pods


CACHEBACKEND_REVIEWS, POD_REVIEWS = _examples()

# Keys the code reads, so added keys reach real branches and not only unknown ones.
_KEYS = st.sampled_from(
    [
        "uid",
        "object",
        "oldObject",
        "operation",
        "namespace",
        "name",
        "kind",
        "metadata",
        "annotations",
        "labels",
        "spec",
        "containers",
        "initContainers",
        "args",
        "env",
        "command",
        "runtime",
        "remoteStorage",
        "integration",
        "lmCache",
        "subResource",
        "dryRun",
        "inferencecache.io/skip-inject",
        "inferencecache.io/injected-by",
    ]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["CREATE", "UPDATE", "DELETE", "Pod", "VLLM", "SGLang", "true", "", "0"])
)
_JSON = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=8), children)
    ),
    max_leaves=12,
)
# Any code point, lone surrogates included (json.dumps \u-escapes them).
_ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)
# JSON text json.dumps cannot produce: nesting deeper than it recurses, and numbers
# Python reads as inf or as huge ints. Placed via a placeholder string, then swapped in.
_RAW_NUMBERS = st.sampled_from(
    ["1e400", "-1e400", "1e-400", "-0", "0.0e0", "1" * 5000, "9" * 300, "1E+2", "-2.5e-3"]
)


def _slots(doc: Any, here: list[Any] | None = None) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every value in ``doc``; (None, None) is the root."""
    if here is None:
        yield None, None
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield doc, key
            yield from _slots(value, [])
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield doc, index
            yield from _slots(value, [])


@st.composite
def mutated_reviews(draw: st.DrawFn, reviews: list[dict[str, Any]]) -> tuple[bytes, Any]:
    """(body bytes, the uid the answer must echo if it is a 200)."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(reviews)))
    raw: dict[str, str] = {}  # placeholder string -> the JSON text it stands for
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        slots = list(_slots(doc))
        container, key = draw(st.sampled_from(slots))
        value = doc if container is None else container[key]
        kind = draw(
            st.sampled_from(
                [
                    "replace",
                    "delete",
                    "add_key",
                    "wrap",
                    "deep",
                    "number",
                    "big",
                    "unicode",
                    "uid",
                ]
            )
        )
        new: Any = value
        if kind == "replace":
            new = draw(_JSON)
        elif kind == "delete" and container is not None:
            del container[key]
            continue
        elif kind == "add_key" and isinstance(value, dict):
            value[draw(_KEYS | _ANY_TEXT)] = draw(_JSON)
            continue
        elif kind == "wrap":
            new = draw(st.sampled_from([[value], {"x": value}, {draw(_KEYS): value}]))
        elif kind == "deep":
            depth = draw(st.sampled_from([1, 50, 500, 990, 1_100, 5_000, 100_000]))
            new = f"\x00raw{len(raw)}\x00"
            raw[new] = "[" * depth + "1" + "]" * depth
        elif kind == "number":
            new = f"\x00raw{len(raw)}\x00"
            raw[new] = draw(_RAW_NUMBERS)
        elif kind == "big":
            new = "x" * draw(st.integers(min_value=0, max_value=MAX_BODY + 1024))
        elif kind == "unicode":
            new = draw(_ANY_TEXT)
        elif kind == "uid" and isinstance(doc, dict) and isinstance(doc.get("request"), dict):
            doc["request"]["uid"] = draw(_JSON | _ANY_TEXT)
            continue
        if container is None:
            doc = new
        else:
            container[key] = new
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    for placeholder, json_text in raw.items():  # a placeholder a later mutation dropped
        text = text.replace(json.dumps(placeholder), json_text, 1)  # is simply absent
    body = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(min_value=0, max_value=19)) == 0:
        body = body[: draw(st.integers(min_value=0, max_value=len(body)))]
    request = doc.get("request") if isinstance(doc, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return body, uid


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    source = FileBackendSource(SAMPLES_DIR, load_backends)
    app = create_app(
        source,
        InjectContext("ghcr.io/inference-cache/kvevent-subscriber:0.1.0"),
        max_body_bytes=MAX_BODY,
    )
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    print(f"\nfuzz cases per route: {CASES}")


def check_answer(route: str, body: bytes, uid: Any, status: int, answer: bytes) -> None:
    assert status < 500, (status, answer[:300])
    payload = json.loads(answer)
    if status != 200:
        assert status in (400, 413), status
        assert isinstance(payload["error"], str), payload
        assert payload["error"], payload
        return
    assert payload["apiVersion"] == "admission.k8s.io/v1"
    assert payload["kind"] == "AdmissionReview"
    response = payload["response"]
    assert isinstance(uid, str)
    assert uid
    assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    if route == PATH_MUTATE_POD:
        assert response["allowed"] is True, response


def _fuzz(client: TestClient, route: str, case: tuple[bytes, Any]) -> None:
    body, uid = case
    CASES[route] = CASES.get(route, 0) + 1
    response = client.post(route, content=body, headers={"Content-Type": "application/json"})
    check_answer(route, body, uid, response.status_code, response.content)


@FUZZ
@given(case=mutated_reviews(CACHEBACKEND_REVIEWS))
def test_fuzz_mutating_cachebackend_route(client: TestClient, case: tuple[bytes, Any]) -> None:
    _fuzz(client, PATH_MUTATE_CB, case)


@FUZZ
@given(case=mutated_reviews(CACHEBACKEND_REVIEWS))
def test_fuzz_validating_cachebackend_route(client: TestClient, case: tuple[bytes, Any]) -> None:
    _fuzz(client, PATH_VALIDATE_CB, case)


@FUZZ
@given(case=mutated_reviews(POD_REVIEWS))
def test_fuzz_pod_route_always_admits(client: TestClient, case: tuple[bytes, Any]) -> None:
    _fuzz(client, PATH_MUTATE_POD, case)


def test_fuzz_reaches_every_kind_of_answer(client: TestClient) -> None:
    """The generator is not vacuous: it produces admits, denials, patches and 400s."""
    seen: set[str] = set()
    for reviews, route in (
        (CACHEBACKEND_REVIEWS, PATH_VALIDATE_CB),
        (POD_REVIEWS, PATH_MUTATE_POD),
    ):
        for review in reviews:
            answer = client.post(route, json=review)
            body = answer.json()
            if answer.status_code == 200:
                seen.add("allowed" if body["response"]["allowed"] else "denied")
                if "patch" in body["response"]:
                    seen.add("patched")
    seen.add(str(client.post(PATH_MUTATE_POD, content=b"[" * 5_000).status_code))
    assert {"allowed", "denied", "patched", "400"} <= seen


def test_examples_are_found() -> None:
    assert len(CACHEBACKEND_REVIEWS) >= 10
    assert len(POD_REVIEWS) >= 5
    assert Path(SAMPLES_DIR).is_dir()
