"""The engine releases the project names agree with shared/engine_versions.py.

- every SGLang and vLLM image the samples, examples and benchmarks name is the release
  ``SAMPLE_TARGETS`` pins (SGLang 0.5.13 is the first whose CLI accepts every flag the
  MP wiring injects and every hiCache enum value the CRD allows);
- docs/api.md's "Engine versions" table is ``MINIMUM``, row for row.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared import engine_versions as ev
from tests.samples import sample_target_release

ROOT = Path(__file__).resolve().parents[3]
IMAGE_PATTERNS = {
    ev.SGLANG: re.compile(r"lmsysorg/sglang:(?P<tag>v[0-9][^\s\"',]*)"),
    ev.VLLM: re.compile(r"vllm/vllm-openai:(?P<tag>v[0-9][^\s\"',]*)"),
}
PINNED_FILES = sorted(
    [
        *ROOT.glob("manifests/samples/*.yaml"),
        *ROOT.glob("examples/admission/*.json"),
        *ROOT.glob("benchmarks/*.py"),
    ]
)
# Header cells of the docs table, package columns by their display name.
DOC_PACKAGES = {"vLLM": ev.VLLM, "SGLang": ev.SGLANG, "LMCache": ev.LMCACHE}
ANY_PROVIDER = "(any)"
NONE = "—"


def image_tags(package: str) -> list[tuple[str, str, str]]:
    """(file, tag, the release the file must name) of every ``package`` image."""
    return [
        (str(path.relative_to(ROOT)), match["tag"], sample_target_release(path, package))
        for path in PINNED_FILES
        for match in IMAGE_PATTERNS[package].finditer(path.read_text())
    ]


@pytest.mark.parametrize("package", [ev.SGLANG, ev.VLLM])
def test_samples_examples_and_benchmarks_name_the_sample_target_release(package: str) -> None:
    """SAMPLE_TARGETS, or a wiring's own sample target (SAMPLE_TARGET_OVERRIDES) in a
    sample of that wiring: vLLM's own offloading names NEWEST."""
    tags = image_tags(package)
    assert tags, f"no {package} image found: the pattern no longer matches the files"
    wrong = [
        (where, tag, want)
        for where, tag, want in tags
        if ev.version_tuple(tag) != ev.version_tuple(want)
    ]
    assert not wrong, f"{package} images not at their sample target: {wrong}"
    if package == ev.VLLM:
        assert {want for _, _, want in tags} == {ev.SAMPLE_TARGETS.vllm, ev.NEWEST.vllm}


def engine_versions_table() -> dict[ev.WiringKey, dict[str, str]]:
    """docs/api.md's "Engine versions" table as MINIMUM's shape."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("\n## Engine versions\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header[:3] == ["runtime", "type", "provider"], header
    out: dict[ev.WiringKey, dict[str, str]] = {}
    for line in rows[2:]:
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        runtime, cache_type, provider = cells[:3]
        key = (runtime, cache_type, None if provider == ANY_PROVIDER else provider)
        assert key not in out, f"duplicate row {key}"
        out[key] = {
            DOC_PACKAGES[name]: value
            for name, value in zip(header[3:], cells[3:], strict=True)
            if value != NONE
        }
    return out


def test_docs_engine_versions_table_is_minimum() -> None:
    assert engine_versions_table() == ev.MINIMUM
