"""shared.quantity: resource.Quantity parsing as the API server does it (spec "Resources")."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from shared.quantity import (
    MAX_DIGITS,
    MAX_MAGNITUDE,
    QUANTITY_FORMAT_ERROR,
    is_integer,
    is_multiple_of,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Decimal(0)),
        ("4Gi", Decimal(4 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("1.5Mi", Decimal(3 * 2**19)),
        ("2Ei", Decimal(2 * 2**60)),
        ("250m", Decimal("0.25")),
        ("100u", Decimal("0.0001")),
        ("5n", Decimal("0.000000005")),
        ("1k", Decimal(1000)),
        ("3M", Decimal(3_000_000)),
        ("2G", Decimal(2 * 10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),
        ("1e3", Decimal(1000)),
        ("12E-1", Decimal("1.2")),
        ("1e+2", Decimal(100)),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+7", Decimal(7)),
        ("-2Mi", Decimal(-2 * 2**20)),
        ("-250m", Decimal("-0.25")),
        (
            "1234567890123456789e-10",
            Decimal("123456789.0123456789").quantize(Decimal("1e-9"), rounding="ROUND_UP"),
        ),
        ("922337203.6854775807G", Decimal("922337203685477580.7")),
    ],
)
def test_parse_quantity_accepts_every_suffix_family(text: str, expected: Decimal) -> None:
    """Binary Ki..Ei, decimal n..E, exponent forms and a sign, exactly (no float rounding)."""
    assert parse_quantity(text) == expected


def test_parse_quantity_takes_ints_and_finite_floats() -> None:
    """A YAML integer or float (``cpu: 0.5``) is a quantity too."""
    assert parse_quantity(3) == 3
    assert parse_quantity(0.5) == Decimal("0.5")


def test_parse_quantity_rounds_sub_nano_values_up_like_the_api_server() -> None:
    """resource.Quantity keeps nano precision, rounding away from zero."""
    assert parse_quantity("0.1n") == Decimal("1e-9")
    assert parse_quantity("1.0000000001") == Decimal("1.000000001")
    assert parse_quantity("-0.1n") == Decimal("-1e-9")


def test_parse_quantity_rejects_magnitudes_beyond_int64_instantly() -> None:
    """Decision: above 2**63-1 (what Quantity.Value() can hold) is rejected, not capped,
    so callers can int() any parsed quantity; huge exponents are refused without
    materialising their digits."""
    assert parse_quantity(str(2**63 - 1)) == MAX_MAGNITUDE
    assert parse_quantity("7Ei") == 7 * 2**60
    assert parse_quantity("-9E") == -(9 * 10**18)
    for too_large in ("8Ei", "1e19", "10E", "1e2000000000", "-1e2000000000", 2**63, 1e19):
        with pytest.raises(ValueError, match="too large"):
            parse_quantity(too_large)
    assert parse_quantity("1e-2000000000") == Decimal("1e-9")  # rounded up to 1n


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " ",
        " 1",
        "1 ",
        "abc",
        "1e",
        "e3",
        "1Ki2",
        "1.2.3",
        "1K",
        "1ki",
        "1e1.5",
        "--1",
        "Gi",
        "1 Gi",
        "0x10",
        "1_000",
        "∞",
        "1Mi ",
        "NaN",
    ],
)
def test_parse_quantity_rejects_malformed_strings(bad: str) -> None:
    with pytest.raises(ValueError, match="quantities must match the regular expression"):
        parse_quantity(bad)


@pytest.mark.parametrize("bad", [True, False, float("nan"), float("inf"), None, [], {}])
def test_parse_quantity_rejects_non_quantities(bad: Any) -> None:
    with pytest.raises(ValueError, match="quantity must be"):
        parse_quantity(bad)


def test_is_integer() -> None:
    """Spec rejectFractionalExtendedResources: 500m is fractional, 2000m and 1e3 are whole."""
    assert not is_integer(parse_quantity("500m"))
    assert is_integer(parse_quantity("2000m"))
    assert is_integer(parse_quantity("1e3"))
    assert is_integer(parse_quantity("0"))
    assert is_integer(Decimal("1e2000000000"))
    assert not is_integer(parse_quantity("1.5"))


def test_is_multiple_of_page_size() -> None:
    """Spec rejectMisalignedHugepageQuantities: 3Mi is not a multiple of 2Mi, 4Mi is."""
    two_mi = parse_quantity("2Mi")
    assert is_multiple_of(parse_quantity("4Mi"), two_mi)
    assert not is_multiple_of(parse_quantity("3Mi"), two_mi)
    assert is_multiple_of(parse_quantity("0"), two_mi)
    assert is_multiple_of(parse_quantity("1Gi"), two_mi)
    assert not is_multiple_of(parse_quantity("1G"), two_mi)  # 10**9 is not 2**21-aligned
    assert is_multiple_of(parse_quantity("1e18"), parse_quantity("1024"))
    assert not is_multiple_of(Decimal("1e2000000000"), parse_quantity("3"))
    assert is_multiple_of(Decimal("1e2000000000"), parse_quantity("2Mi"))
    assert not is_multiple_of(parse_quantity("1500m"), parse_quantity("1"))
    assert is_multiple_of(parse_quantity("1500m"), parse_quantity("500m"))
    with pytest.raises(ValueError, match="unit must be positive"):
        is_multiple_of(Decimal(4), Decimal(0))


def test_parse_quantity_bounds_the_number_of_digits() -> None:
    """Decision: more than MAX_DIGITS digits is rejected (keeps arithmetic cheap and under
    Python's int/str conversion limit)."""
    assert parse_quantity("0." + "1" * (MAX_DIGITS - 2)) > 0
    with pytest.raises(ValueError, match="digits"):
        parse_quantity("1" * (MAX_DIGITS + 1))
    with pytest.raises(ValueError, match="digits"):
        parse_quantity("0." + "1" * MAX_DIGITS)


def test_parse_quantity_error_is_the_api_servers_wording() -> None:
    with pytest.raises(ValueError, match="quantities must match") as info:
        parse_quantity("8 GB")
    assert str(info.value) == QUANTITY_FORMAT_ERROR
    assert QUANTITY_FORMAT_ERROR == (
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
