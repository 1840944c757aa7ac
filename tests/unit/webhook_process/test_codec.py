"""The orjson fast path decides exactly as the json path does.

``decode_body`` tries orjson first and falls back to the stdlib path for anything
orjson refuses or would read differently; every body here must give the same value,
or the same ``BadBodyError`` (reason and wording), on both paths. ``encode_json`` must give
bytes that decode to the same value and still refuse NaN/Infinity. ``json_copy`` is a
deep copy; cached quantity parsing returns the same values and still rejects malformed
strings every time.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson
import pytest

from shared.jsoncopy import json_copy
from shared.quantity import parse_quantity
from tests.builders import review_of
from webhook_svc.http import codec
from webhook_svc.http.codec import BadBodyError, decode_body, encode_json

REVIEW: dict[str, Any] = review_of(
    {
        "uid": "u-1",
        "object": {"metadata": {"name": "ünïcode ✓"}, "spec": {"replicas": 2, "x": [1.5, None]}},
    }
)

BODIES = [
    json.dumps(REVIEW).encode(),
    json.dumps(REVIEW, ensure_ascii=False).encode("utf-8"),
    b'{"big": 123456789012345678901234567890}',  # orjson would make it a float
    b'{"n": -9223372036854775809, "u": 18446744073709551616}',
    b'{"x": NaN}',
    b'{"x": Infinity}',
    b'{"x": 1e400}',
    b'{"x": -1e400, "y": 1.0e-400}',
    json.dumps(REVIEW).encode("utf-16"),  # json.loads detects UTF-16/32
    b'{"dup": 1, "dup": 2}',
    b'["\\ud800"]',  # a lone surrogate escape
    b'["\\ud83d\\ude00"]',  # a surrogate pair
    b"[" * 1100 + b"]" * 1100,  # deeper than orjson goes
    b"",
    b"{",
    b"\xff\xfe\x00",
    b"[1,]",
    b"not json",
    b"-0",
    b"1E5",
]


def _outcome(raw: bytes) -> tuple[str, Any]:
    try:
        return "value", json.dumps(decode_body(raw), sort_keys=True)
    except BadBodyError as exc:
        return "bad", (exc.reason, exc.detail)


@pytest.mark.parametrize("raw", BODIES, ids=range(len(BODIES)))
def test_fast_path_decides_like_the_json_path(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _outcome(raw)
    monkeypatch.setattr(codec, "_decode_fast", lambda raw: codec._SLOW_PATH)
    assert fast == _outcome(raw)


def test_encode_json_round_trips_and_refuses_non_finite() -> None:
    assert json.loads(encode_json(REVIEW)) == REVIEW
    odd = {"n": 2**70, "k": {1: "int key"}}
    assert json.loads(encode_json(odd)) == {"n": 2**70, "k": {"1": "int key"}}
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode_json({"x": [float("nan")]})
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode_json({"x": float("inf")})


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
        with pytest.raises(ValueError, match="regular expression"):
            parse_quantity("1 Gi")
    with pytest.raises(ValueError, match="not a boolean"):
        parse_quantity(True)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"1" * 18,
        b"1" * 19,
        b'{"n": 123456789012345678}',
        b'{"n": 1234567890123456789}',
        b'{"n": -9223372036854775808}',
        b"x1234567890y1234567890",
        b"\xff\xfe" + b"9" * 19 + b"\x00",
        "٠١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩".encode(),  # non-ASCII digits do not count
        bytes(range(256)) * 3,
    ],
)
def test_has_long_digit_run_agrees_with_the_regex(raw: bytes) -> None:
    """The translate-and-search check finds exactly what [0-9]{19} finds."""
    import re

    expected = re.search(rb"[0-9]{19}", raw) is not None
    assert codec.has_long_digit_run(raw) is expected


def test_encode_json_walks_big_answers_and_refuses_cycles_as_json_does() -> None:
    """The non-finite check is a bounded loop: a very large answer still encodes
    exactly (through json past the bound), and a cycle is refused as json refuses it."""
    big = {"items": list(range(150_000)), "f": [0.5] * 10}
    assert orjson.loads(encode_json(big)) == big
    with pytest.raises(ValueError, match=r"Out of range|not JSON compliant"):
        encode_json({"items": [1.0] * 150_000 + [float("nan")]})
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(ValueError, match="Circular reference"):
        encode_json(cycle)
