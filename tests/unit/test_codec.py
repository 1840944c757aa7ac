"""Issue 12 item 2: the fast codec and copies decide exactly as the stdlib did.

orjson decodes/encodes the AdmissionReview; whatever ``json`` accepted is still
accepted (the stdlib decodes what orjson refuses), and the encoded bytes decode to
the same value. ``json_copy`` is a deep copy; cached quantity parsing returns the
same values and still rejects malformed strings every time.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from shared.jsoncopy import json_copy
from shared.quantity import parse_quantity
from webhook_svc.codec import decode_review, encode_response

REVIEW: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "u-1",
        "object": {"metadata": {"name": "ünïcode ✓"}, "spec": {"replicas": 2, "x": [1.5, None]}},
    },
}


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(REVIEW).encode(),
        json.dumps(REVIEW, ensure_ascii=False).encode("utf-8"),
        b'{"big": 123456789012345678901234567890}',  # orjson would make it a float
        b'{"n": -9223372036854775809, "u": 18446744073709551616}',
        b'{"x": NaN, "y": Infinity}',  # the stdlib's extensions
        json.dumps(REVIEW).encode("utf-16"),  # json.loads detects UTF-16/32
        b'{"dup": 1, "dup": 2}',
    ],
)
def test_decode_review_accepts_what_json_accepted(body: bytes) -> None:
    decoded = decode_review(body)
    expected = json.loads(body)
    assert json.dumps(decoded, sort_keys=True) == json.dumps(expected, sort_keys=True)


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe\x00", b"[1,]", b"not json"])
def test_decode_review_rejects_what_json_rejected(body: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(body)
    with pytest.raises(ValueError):
        decode_review(body)


def test_encode_response_round_trips() -> None:
    assert json.loads(encode_response(REVIEW)) == REVIEW


def test_encode_response_falls_back_for_types_orjson_refuses() -> None:
    odd = {"n": 2**70, "k": {1: "int key"}}
    assert json.loads(encode_response(odd)) == {"n": 2**70, "k": {"1": "int key"}}


def test_json_copy_is_a_deep_copy() -> None:
    original: dict[str, Any] = {
        "a": [{"b": {"c": [1, 2]}}],
        "t": (1, 2),
        "d": Decimal("1.5"),
        "s": "x",
    }
    copied = json_copy(original)
    assert copied == original
    copied["a"][0]["b"]["c"].append(3)
    copied["a"].append({})
    assert original == {"a": [{"b": {"c": [1, 2]}}], "t": (1, 2), "d": Decimal("1.5"), "s": "x"}
    assert copied["a"][0] is not original["a"][0]


def test_parse_quantity_cache_is_transparent() -> None:
    for _ in range(3):
        assert parse_quantity("1Gi") == Decimal(2**30)
        assert parse_quantity("500m") == Decimal("0.5")
        with pytest.raises(ValueError):
            parse_quantity("1 Gi")
    with pytest.raises(ValueError):
        parse_quantity(True)
