"""Go ``time.Duration`` strings, parsed exactly as Go's ``time.ParseDuration`` does.

spec.observation.firstEventTimeout is a Go duration: the API server checks it with the
CRD pattern below (RE2), the webhook and the reconciler parse it with
:func:`parse_go_duration`. Both accept exactly what Go accepts:

- an optional sign, then either the bare ``"0"`` or one or more ``<number><unit>``;
- a number is ``digits``, ``digits.``, ``digits.digits`` or ``.digits``;
- units ``ns``, ``us``, ``µs`` (U+00B5), ``μs`` (U+03BC), ``ms``, ``s``, ``m``, ``h``;
- the total must fit an int64 of nanoseconds (about 292 years).

So ``"0"``, ``"0s"``, ``"1h30m"``, ``"1.5h"``, ``"90s"`` and ``"-1s"`` parse, while
``"1d"`` (no day unit), ``"5 m"`` (no spaces), ``""`` and ``"."`` do not. A negative
duration is grammatical; whether a field accepts one is a validation rule of its own.
"""

from __future__ import annotations

import functools
from typing import Final

# The CRD pattern: Go's grammar (the overflow bound is checked by the webhook).
GO_DURATION_PATTERN: Final = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"

NANOSECOND: Final = 1
MICROSECOND: Final = 1000 * NANOSECOND
MILLISECOND: Final = 1000 * MICROSECOND
SECOND: Final = 1000 * MILLISECOND
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

UNITS: Final[dict[str, int]] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "µs": MICROSECOND,  # U+00B5 micro sign
    "μs": MICROSECOND,  # U+03BC Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}

_MAX: Final = (1 << 63) - 1
_LIMIT: Final = 1 << 63


class DurationError(ValueError):
    """Not a Go duration (``time: invalid duration`` and friends)."""


def _leading_int(s: str) -> tuple[int, str]:
    """Go's leadingInt: the leading digits as an integer, overflow past 1<<63 an error."""
    x, i = 0, 0
    while i < len(s) and "0" <= s[i] <= "9":
        if x > _LIMIT // 10:
            raise DurationError("bad [0-9]*")
        x = x * 10 + ord(s[i]) - ord("0")
        if x > _LIMIT:
            raise DurationError("bad [0-9]*")
        i += 1
    return x, s[i:]


def _leading_fraction(s: str) -> tuple[int, float, str]:
    """Go's leadingFraction: digits after the point; precision beyond int64 is dropped."""
    x, scale, i, overflow = 0, 1.0, 0, False
    while i < len(s) and "0" <= s[i] <= "9":
        if not overflow:
            if x > _MAX // 10:
                overflow = True
            else:
                y = x * 10 + ord(s[i]) - ord("0")
                if y > _LIMIT:
                    overflow = True
                else:
                    x = y
                    scale *= 10
        i += 1
    return x, scale, s[i:]


# Pure, with an immutable answer: parsed once per distinct string per process (two
# rules read the same field on every admission). Errors are not cached.
@functools.lru_cache(maxsize=1024)
def parse_go_duration_ns(text: str) -> int:
    """Nanoseconds in ``text``, exactly as Go's ``time.ParseDuration``; DurationError if not."""
    orig, s = text, text
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise DurationError(f"invalid duration {orig!r}")
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise DurationError(f"invalid duration {orig!r}")
        before = len(s)
        try:
            value, s = _leading_int(s)
        except DurationError:
            raise DurationError(f"invalid duration {orig!r}") from None
        pre = before != len(s)
        frac, scale, post = 0, 1.0, False
        if s and s[0] == ".":
            s = s[1:]
            before = len(s)
            frac, scale, s = _leading_fraction(s)
            post = before != len(s)
        if not pre and not post:
            raise DurationError(f"invalid duration {orig!r}")
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise DurationError(f"missing unit in duration {orig!r}")
        unit_text, s = s[:i], s[i:]
        unit = UNITS.get(unit_text)
        if unit is None:
            raise DurationError(f"unknown unit {unit_text!r} in duration {orig!r}")
        if value > _LIMIT // unit:
            raise DurationError(f"invalid duration {orig!r}")
        value *= unit
        if frac > 0:
            value += int(float(frac) * (float(unit) / scale))
            if value > _LIMIT:
                raise DurationError(f"invalid duration {orig!r}")
        total += value
        if total > _LIMIT:
            raise DurationError(f"invalid duration {orig!r}")
    if neg:
        return -total
    if total > _MAX:
        raise DurationError(f"invalid duration {orig!r}")
    return total


def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go duration string, or None when it is not one."""
    try:
        return parse_go_duration_ns(text) / SECOND
    except DurationError:
        return None
