"""The engine images the samples, Pod examples and benchmarks name are the releases the
contract tests prove (``SAMPLE_TARGETS``): a sample on another release would run wiring
nothing checked; and ``MINIMUM`` names only proven releases. Pure: reads the
repository, not the engine sources."""

from __future__ import annotations

import re

import pytest

from shared.engine_versions import (
    ALSO_PROVEN,
    LMCACHE,
    MINIMUM,
    NEWEST,
    REJECTED,
    SAMPLE_TARGETS,
    SGLANG,
    VLLM,
    older_than,
    version_tuple,
)
from tests.samples import ROOT, sample_target_release

# image repository -> the package whose release its tag names
IMAGES = {
    "vllm/vllm-openai": VLLM,
    "lmsysorg/sglang": SGLANG,
    "lmcache/standalone": LMCACHE,
}
PLACES = ("manifests/samples", "examples/admission", "benchmarks")
_IMAGE = re.compile(r"\b(" + "|".join(map(re.escape, IMAGES)) + r"):(v?[0-9][\w.+-]*)")


def image_tags() -> list[tuple[str, str, str]]:
    """(file, image repository, tag) of every pinned engine image in ``PLACES``."""
    out = []
    for place in PLACES:
        for path in sorted((ROOT / place).rglob("*")):
            if path.suffix not in (".yaml", ".yml", ".json", ".py") or not path.is_file():
                continue
            for match in _IMAGE.finditer(path.read_text(encoding="utf-8")):
                out.append((str(path.relative_to(ROOT)), match.group(1), match.group(2)))
    return out


def release_of(tag: str) -> str:
    """``0.5.13-cu126`` -> ``0.5.13``."""
    parsed = version_tuple(tag)
    return ".".join(map(str, parsed)) if parsed else tag


def test_some_engine_images_are_named() -> None:
    assert {repo for _, repo, _ in image_tags()} == set(IMAGES)


@pytest.mark.parametrize(("path", "repo", "tag"), image_tags(), ids=lambda v: str(v))
def test_engine_image_is_a_sample_target(path: str, repo: str, tag: str) -> None:
    package = IMAGES[repo]
    want = sample_target_release(ROOT / path, package)
    assert want in (SAMPLE_TARGETS.of(package), NEWEST.of(package)), want
    assert release_of(tag) == want, (
        f"{path}: {repo}:{tag} is {package} {release_of(tag)}, but the contract tests prove "
        f"the wiring against {package} {want} (SAMPLE_TARGETS or the wiring's "
        f"SAMPLE_TARGET_OVERRIDES, shared/engine_versions.py)"
    )


@pytest.mark.parametrize("key", sorted(MINIMUM, key=str), ids=str)
def test_every_minimum_is_a_release_the_contract_tests_prove(
    key: tuple[str, str, str | None],
) -> None:
    """MINIMUM (docs/api.md "Engine versions") claims only what the contract tests
    prove: each minimum is a pinned release, and every rejected release is older."""
    for package, version in MINIMUM[key].items():
        proven = (SAMPLE_TARGETS.of(package), NEWEST.of(package), *ALSO_PROVEN.get(package, ()))
        assert version in proven, f"{key}: {package} {version} is not a pinned release {proven}"
        for rejected in REJECTED.get(package, ()):
            assert older_than(rejected, version), (
                f"{key}: {package} minimum {version} is not newer than rejected {rejected}"
            )
