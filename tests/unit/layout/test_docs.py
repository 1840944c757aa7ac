"""The repository carries its own design docs, and they stay true.

Code and tests cite docs/api.md, docs/architecture.md and docs/server-contract.md,
never design files outside the repository. docs/api.md names every admission rule
(by its function name in shared/validation) and every condition, reason, annotation
and Event name the code spells in shared/constants.py, so adding one without
documenting it fails here. Relative links in the docs resolve.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared import constants as c
from shared.validation.rules import RULES

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"
API = DOCS / "api.md"
CODE_ROOTS = ("shared", "webhook_svc", "reconciler", "icache_install", "tests", "benchmarks")
# A design file cited without the docs/ directory is one outside the repository.
OUT_OF_TREE = re.compile(r"(?<!docs/)\b(cachebackend-api\.md|server-contract\.md)|\bARCHITECTURE\b")


def _code_files() -> list[Path]:
    return [
        p
        for root in CODE_ROOTS
        if (REPO / root).is_dir()
        for p in (REPO / root).rglob("*.py")
        if p != Path(__file__).resolve()
    ]


def test_code_and_tests_cite_only_the_docs_in_the_repository() -> None:
    found = [
        f"{p.relative_to(REPO)}:{n}: {m.group(0)}"
        for p in _code_files()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        for m in OUT_OF_TREE.finditer(line)
    ]
    assert not found, "cite docs/api.md, docs/architecture.md or docs/server-contract.md:\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    "name", ["api.md", "architecture.md", "server-contract.md", "decisions.md"]
)
def test_each_design_doc_exists(name: str) -> None:
    assert (DOCS / name).is_file()


def test_api_doc_names_every_admission_rule() -> None:
    text = API.read_text()
    missing = [r.check.__name__ for r in RULES if f"`{r.check.__name__}`" not in text]
    assert not missing, f"docs/api.md does not document: {missing}"


@pytest.mark.parametrize("prefix", ["COND_", "REASON_", "EVENT_", "ANNOTATION_"])
def test_api_doc_names_every_constant(prefix: str) -> None:
    text = API.read_text()
    values = {
        str(value)
        for name, value in vars(c).items()
        if name.startswith(prefix) and isinstance(value, str)
    }
    assert values
    missing = sorted(
        v for v in values if not re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", text)
    )
    assert not missing, f"docs/api.md does not name: {missing}"


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize(
    "doc", [*sorted(DOCS.glob("*.md")), REPO / "README.md"], ids=lambda p: p.name
)
def test_relative_links_resolve(doc: Path) -> None:
    broken = [
        target
        for target in LINK.findall(doc.read_text())
        if "://" not in target and not (doc.parent / target).exists()
    ]
    assert not broken, f"{doc.name}: broken links {broken}"


DECISIONS = DOCS / "decisions.md"
INDEX_LINK = re.compile(r"\[[^\]]+\]\(#([^)\s]+)\)")


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than ``-``
    and ``_`` dropped, each space a ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def decisions_sections(text: str) -> tuple[str, list[str]]:
    """The text before the first ``##`` section (the title, intro and index), and
    every ``##`` section's anchor, outside code fences."""
    lines = text.splitlines()
    anchors: list[str] = []
    first: int | None = None
    fenced = False
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            first = number if first is None else first
            anchors.append(heading_anchor(line[3:]))
    return "\n".join(lines[:first]), anchors


def test_heading_anchor_is_githubs() -> None:
    assert heading_anchor("Reconciler (dispatcher + workers)") == "reconciler-dispatcher--workers"
    assert heading_anchor("Command line (`icache`)") == "command-line-icache"
    assert heading_anchor("Cross-namespace consumers need the owner's consent") == (
        "cross-namespace-consumers-need-the-owners-consent"
    )


def test_the_index_check_sees_a_missing_and_a_dangling_entry() -> None:
    head, anchors = decisions_sections(
        "# T\n\n- **A:** [One](#one); [Gone](#gone).\n\n## One\n```\n## not a section\n```\n## Two\n"
    )
    linked = INDEX_LINK.findall(head)
    assert set(anchors) - set(linked) == {"two"}
    assert set(linked) - set(anchors) == {"gone"}


def test_decisions_index_lists_every_section_once_and_only_sections() -> None:
    """docs/decisions.md opens with an index by area: every ``##`` section is linked
    from it exactly once, and every index link points at a section, so a newcomer
    finds a decision in one look and a section added without an index entry fails."""
    head, anchors = decisions_sections(DECISIONS.read_text())
    linked = INDEX_LINK.findall(head)
    assert len(anchors) == len(set(anchors)), "two sections share a heading"
    missing = [a for a in anchors if a not in linked]
    dangling = [a for a in linked if a not in anchors]
    twice = sorted({a for a in linked if linked.count(a) > 1})
    assert not missing, f"sections missing from the index of docs/decisions.md: {missing}"
    assert not dangling, f"index links of docs/decisions.md to no section: {dangling}"
    assert not twice, f"sections listed twice in the index: {twice}"
