"""Request bodies in, response bodies out: the webhook's one JSON decoder and encoder.

Every route goes through ``decode_body`` and ``encode_json``, so a faster JSON library
is a change to this module only: orjson where it gives exactly ``json``'s answer, and
``json`` for everything else. ``decode_body`` turns every way a body can fail to be
JSON into ``BadBodyError`` (an HTTP 400 naming the problem): bytes that are not UTF-8, nesting
deeper than the parser's recursion limit (``RecursionError`` is not a ``ValueError``),
the non-JSON constants ``NaN``/``Infinity`` and numbers that overflow to them (``1e400``),
and lone UTF-16 surrogate escapes
(``"\\ud800"``), which no UTF-8 response could echo back.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import orjson

# A \u escape of a surrogate code point (D800-DFFF): only then can a lone one exist.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


class BadBodyError(ValueError):
    """The body is not JSON we can answer: HTTP 400 with ``reason`` as the metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400: no answer could carry it back as JSON
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def decode_body(raw: bytes) -> Any:
    """The parsed body, or ``BadBodyError``."""
    fast = _decode_fast(raw)
    if fast is not _SLOW_PATH:
        return fast
    try:
        value = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise BadBodyError("too_deep", "body is not JSON we accept: it nests too deeply") from None
    except UnicodeDecodeError as exc:
        raise BadBodyError("malformed", f"body is not UTF-8 JSON: {exc.reason}") from None
    except ValueError as exc:
        raise BadBodyError("malformed", f"body is not JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadBodyError(
                "malformed", "body is not valid Unicode: it holds a lone UTF-16 surrogate escape"
            ) from None
        except RecursionError:
            raise BadBodyError(
                "too_deep", "body is not JSON we accept: it nests too deeply"
            ) from None
    return value


_SLOW_PATH: Final = object()
# Digit runs this short always fit an int64, which orjson keeps exact; a longer one may
# be an integer orjson would turn into a float, so ``json`` decodes it. Found by mapping
# every digit to "0" and every other byte to " " and searching for 19 zeros: bytes does
# both in C, ten times faster than the regex [0-9]{19} (the regex
# cost more than orjson's whole parse).
LONG_DIGIT_RUN: Final = 19
_DIGITS_AS_ZEROS: Final = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_ZEROS: Final = b"0" * LONG_DIGIT_RUN


def has_long_digit_run(raw: bytes) -> bool:
    """``raw`` holds LONG_DIGIT_RUN or more ASCII digits in a row."""
    return _ZEROS in raw.translate(_DIGITS_AS_ZEROS)


def _decode_fast(raw: bytes) -> Any:
    """orjson's parse (several times faster than ``json``), or ``_SLOW_PATH``.

    orjson refuses everything ``decode_body`` turns into ``BadBodyError`` (non-UTF-8 bytes,
    NaN/Infinity, numbers that overflow, lone surrogate escapes, nesting past 1024) and
    a few bodies ``json`` accepts (UTF-16/32, nesting between 1024 and the recursion
    limit): anything it refuses takes the ``json`` path, so what is accepted, what is
    refused, and the 400's wording are exactly as before.
    """
    if has_long_digit_run(raw):
        return _SLOW_PATH
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _SLOW_PATH


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; never emits NaN/Infinity (those raise ``ValueError``)."""
    try:
        # orjson writes NaN/Infinity as null: only finite values may take this path.
        if _finite(value):
            return orjson.dumps(value)
    except (TypeError, RecursionError):  # a type orjson refuses, or too deep to check
        pass
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
            "utf-8"
        )
    except UnicodeEncodeError:
        # A lone surrogate made it in after all: \u-escape it rather than fail to answer.
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode("ascii")


# Nodes _finite looks at before it leaves the answer to ``json`` (which is exact, and
# refuses a cycle): no answer of ours comes near it.
_FINITE_WALK_LIMIT: Final = 100_000


def _finite(value: Any) -> bool:
    """No float in ``value`` is NaN or infinite (those must raise, as ``json`` does).
    A loop over a stack, not recursion: it runs on every answer."""
    stack = [value]
    budget = _FINITE_WALK_LIMIT
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is dict:
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
        elif kind is float and not math.isfinite(node):
            return False
        budget -= 1
        if budget == 0:
            return False
    return True
