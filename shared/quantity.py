"""Kubernetes resource.Quantity parsing, exact (decimal), the way the API server reads it.

Accepted forms (k8s.io/apimachinery/pkg/api/resource):

    <sign><digits>[.<digits>]<suffix>
    sign     optional "+" or "-"
    number   "5", "5.", ".5", "1.25"
    suffix   binary  Ki Mi Gi Ti Pi Ei            (powers of 1024)
             decimal n u m "" k M G T P E         (powers of 1000)
             exponent e<int> / E<int>             ("1e3", "2E-2"; the exponent is an integer)

Like the API server, a value with a fractional part finer than a nanounit is rounded
away from zero to the next nanounit ("0.1n" is 1n). Values are exact. Two
deliberate limits: a magnitude above ``MAX_MAGNITUDE`` (2**63-1, the int64 every
Kubernetes component reads a quantity into) is rejected instead of silently capped,
and so is a number written with more than ``MAX_DIGITS`` digits. Any parsed quantity
can therefore be turned into an int cheaply.
"""

from __future__ import annotations

import decimal
import functools
import math
import re
from decimal import Decimal

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)

_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# The API server stores the exponent as an int32.
_MAX_EXPONENT = 2**31 - 1
# No resource needs more significant digits; the bound keeps every computation on a
# quantity cheap (and under Python's int/str conversion limit).
MAX_DIGITS = 1000
# The largest magnitude Kubernetes components can use (Quantity.Value() is an int64 and
# the API server caps binary-suffixed values there). Larger values are rejected rather
# than capped, so callers can turn any parsed quantity into an int without surprises.
MAX_MAGNITUDE = Decimal(2**63 - 1)

_NANO = Decimal("1e-9")

# resource.ErrFormatWrong, as the API server words it.
QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _context(digits: int) -> decimal.Context:
    # Enough precision that no arithmetic here ever rounds.
    return decimal.Context(prec=max(64, digits + 32), Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a resource.Quantity; ValueError when it is malformed.

    Integers are taken as they are; floats (a YAML ``cpu: 0.5``) must be finite. Strings
    must match the Quantity grammar exactly: no whitespace, no empty string.
    """
    if isinstance(value, bool):
        raise ValueError(f"quantity must be a number or a string, not a boolean: {value!r}")
    if isinstance(value, int):
        if abs(value) > MAX_MAGNITUDE:
            raise ValueError(f"quantity is too large (more than {MAX_MAGNITUDE})")
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"quantity must be finite: {value!r}")
        if abs(value) > MAX_MAGNITUDE:
            raise ValueError(f"quantity is too large (more than {MAX_MAGNITUDE})")
        return _round_to_nano(Decimal(repr(value)))
    if not isinstance(value, str):
        raise ValueError(f"quantity must be a number or a string: {value!r}")
    return _parse_string(str(value))


# A pure function of an immutable string: a webhook sees the same few quantities on
# every request, and parsing each one again was a fifth of a validation.
# A malformed string raises, and exceptions are not cached.
@functools.lru_cache(maxsize=4096)
def _parse_string(value: str) -> Decimal:
    match = _QUANTITY_RE.fullmatch(value)
    if match is None:
        raise ValueError(QUANTITY_FORMAT_ERROR)
    if len(match.group("number")) > MAX_DIGITS:
        raise ValueError(f"quantity has more than {MAX_DIGITS} digits")
    number = Decimal(match.group("number"))
    suffix = match.group("suffix") or ""
    ctx = _context(len(match.group("number")))
    if suffix in _BINARY_SUFFIXES:
        amount = ctx.multiply(number, Decimal(2) ** _BINARY_SUFFIXES[suffix])
    else:
        if suffix in _DECIMAL_SUFFIXES:
            exponent = _DECIMAL_SUFFIXES[suffix]
        elif suffix:
            exponent = int(suffix[1:])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"quantity exponent out of range: {value!r}")
        else:
            exponent = 0
        amount = number.scaleb(exponent, ctx)
    if amount > MAX_MAGNITUDE:
        raise ValueError(f"quantity is too large (more than {MAX_MAGNITUDE})")
    if match.group("sign") == "-":
        amount = -amount
    return _round_to_nano(amount)


def _round_to_nano(amount: Decimal) -> Decimal:
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -9:
        ctx = _context(len(amount.as_tuple().digits))
        return amount.quantize(_NANO, rounding=decimal.ROUND_UP, context=ctx)
    return amount


def _coefficient_and_exponent(amount: Decimal) -> tuple[int, int]:
    """(c, e) with amount == c * 10**e and c not divisible by 10 (unless it is 0)."""
    sign, digits, exponent = amount.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)) or "0")
    while coefficient and coefficient % 10 == 0:
        coefficient //= 10
        exponent += 1
    return (-coefficient if sign else coefficient), exponent


def is_integer(amount: Decimal) -> bool:
    """Whether a parsed quantity is a whole number (no milli/micro/nano part)."""
    coefficient, exponent = _coefficient_and_exponent(amount)
    return coefficient == 0 or exponent >= 0


def is_multiple_of(amount: Decimal, unit: Decimal) -> bool:
    """Whether ``amount`` is a whole multiple of the positive ``unit``, exactly.

    With amount = a*10**p and unit = u*10**q (a, u free of trailing zeros) the quotient
    is an integer iff u divides a*10**(p-q) when p >= q; when p < q it never is (a would
    need a factor 10). Modular exponentiation keeps "1e2000000000" instant.
    """
    if unit <= 0:
        raise ValueError(f"unit must be positive: {unit}")
    a, p = _coefficient_and_exponent(amount)
    u, q = _coefficient_and_exponent(unit)
    if a == 0:
        return True
    if p < q:
        return False
    return (a * pow(10, p - q, u)) % u == 0
