"""shared/engine_versions.py: the pinned engine releases and the minimum per wiring."""

from __future__ import annotations

import pytest

from shared import constants as c
from shared import engine_versions as ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.4.7", (0, 4, 7)),
        ("v0.5.6", (0, 5, 6)),
        ("0.5.3.post1", (0, 5, 3)),
        ("0.11.0+cu126", (0, 11, 0)),
        ("0.5.0rc1", (0, 5, 0)),
        ("latest", None),
        ("", None),
    ],
)
def test_version_tuple_parses_release_strings(text: str, expected: tuple[int, ...] | None) -> None:
    assert ev.version_tuple(text) == expected


def test_older_than_compares_numerically_and_refuses_to_guess() -> None:
    assert ev.older_than("0.4.10", "0.4.7") is False
    assert ev.older_than("0.4.6", "0.4.7") is True
    assert ev.older_than("0.5", "0.5.0") is False
    assert ev.older_than("nightly", "0.4.7") is None


def test_minimum_falls_back_to_the_pairs_row_for_a_provider_without_one() -> None:
    assert ev.minimum_for(c.RUNTIME_SGLANG, c.TYPE_SGLANG_HICACHE, c.PROVIDER_REDIS) == {
        ev.SGLANG: "0.5.13"
    }
    assert ev.minimum_for("Unknown", c.TYPE_LMCACHE, None) == {}


def sample_target(key: ev.WiringKey, package: str) -> str:
    """The release of ``package`` the samples of wiring ``key`` name."""
    return ev.SAMPLE_TARGET_OVERRIDES.get(key, {}).get(package) or ev.SAMPLE_TARGETS.of(package)


def test_every_minimum_is_no_newer_than_the_sample_targets() -> None:
    """Each wiring's samples name a release at or above its minimum (the wiring's own
    sample target where it has one, SAMPLE_TARGETS otherwise)."""
    for key, row in ev.MINIMUM.items():
        for package, minimum in row.items():
            assert ev.older_than(sample_target(key, package), minimum) is False


def test_vllm_offloading_samples_name_the_newest_vllm() -> None:
    key = (c.RUNTIME_VLLM, c.TYPE_VLLM_OFFLOADING, None)
    assert sample_target(key, ev.VLLM) == ev.NEWEST.vllm
    assert sample_target((c.RUNTIME_VLLM, c.TYPE_LMCACHE, None), ev.VLLM) == "0.11.0"
