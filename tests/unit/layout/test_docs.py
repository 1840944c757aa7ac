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
