"""JSON in and out of the admission routes: orjson, with the stdlib as the referee.

orjson decodes and encodes an AdmissionReview several times faster than ``json``
(issue 12 profile). Its grammar is a little narrower (no NaN/Infinity, UTF-8 only),
so a body orjson rejects is decoded again by ``json``: exactly what was accepted
before is still accepted, and anything else fails the same way (ValueError, a 400).
orjson also turns an integer beyond 64 bits into a float where ``json`` keeps it
exact, so a body with a run of 19 or more digits goes to ``json`` directly (a
validation error must name the value as written). Encoding falls back the same way
for a type orjson does not know.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# Shorter digit runs always fit in an int64, which orjson keeps exact.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def decode_review(body: bytes) -> Any:
    """The decoded JSON body; ValueError (or UnicodeDecodeError) when it is not JSON."""
    if _LONG_DIGITS.search(body):
        return json.loads(body)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def encode_response(obj: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's JSONResponse renders it."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(
            obj, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        ).encode("utf-8")
