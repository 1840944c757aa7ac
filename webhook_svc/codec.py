"""Request bodies in, response bodies out: the webhook's one JSON decoder and encoder.

Every route goes through ``decode_body`` and ``encode_json``, so a faster JSON library
is a change to this module only. ``decode_body`` turns every way a body can fail to be
JSON into ``BadBody`` (an HTTP 400 naming the problem): bytes that are not UTF-8, nesting
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

# A \u escape of a surrogate code point (D800-DFFF): only then can a lone one exist.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


class BadBody(ValueError):
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
    """The parsed body, or ``BadBody``."""
    try:
        value = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise BadBody("too_deep", "body is not JSON we accept: it nests too deeply") from None
    except UnicodeDecodeError as exc:
        raise BadBody("malformed", f"body is not UTF-8 JSON: {exc.reason}") from None
    except ValueError as exc:
        raise BadBody("malformed", f"body is not JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadBody(
                "malformed", "body is not valid Unicode: it holds a lone UTF-16 surrogate escape"
            ) from None
        except RecursionError:
            raise BadBody("too_deep", "body is not JSON we accept: it nests too deeply") from None
    return value


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; never emits NaN/Infinity (those raise ``ValueError``)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
            "utf-8"
        )
    except UnicodeEncodeError:
        # A lone surrogate made it in after all: \u-escape it rather than fail to answer.
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode("ascii")
