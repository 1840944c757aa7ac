"""Variables the webhook injects that no reader of their container reads, in any pinned
release, are reported (end of run, and as the ``unread`` property) and must equal the
documented listing ``UNREAD_BY_ENGINES``: a new one, or one an engine starts reading,
is a change the docs must follow."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.engine_contracts import conftest
from tests.engine_contracts.cases import (
    OWN_IMAGES,
    cases_of,
    example_case,
    example_pods,
    sample_backends,
)
from tests.engine_contracts.checks import check_pod
from tests.engine_contracts.releases import SETS, releases
from tests.engine_contracts.unread import UNREAD_BY_ENGINES

pytestmark = pytest.mark.engine_contracts

REPO = Path(__file__).resolve().parents[2]


def unread_listing() -> dict[str, tuple[str, ...]]:
    found: dict[str, set[str]] = {}
    for set_name, pinned in SETS.items():
        rel = releases(set_name)
        cases = [case for sample, _ in sample_backends() for case in cases_of(sample, pinned)]
        cases += [case for name, pod in example_pods() if (case := example_case(name, pod))]
        for case in cases:
            report = check_pod(
                rel, case.runtime, case.original, case.wired, case.endpoint, OWN_IMAGES
            )
            for unread in report.unread:
                found.setdefault(unread.variable, set()).add(unread.readers)
    return {k: tuple(sorted(v)) for k, v in sorted(found.items())}


def test_unread_variables_are_the_documented_ones(
    record_property: Callable[[str, object], None],
) -> None:
    found = unread_listing()
    conftest.FOUND.clear()
    conftest.FOUND.update(found)
    record_property("unread", json.dumps(found))
    assert found == UNREAD_BY_ENGINES, (
        "the injected variables no engine release reads changed; update UNREAD_BY_ENGINES "
        "(tests/engine_contracts/unread.py) and docs/api.md to:\n" + json.dumps(found, indent=2)
    )


def test_docs_list_exactly_the_unread_variables() -> None:
    """docs/api.md's delimited "Injected items no engine reads" table names the same
    variables as UNREAD_BY_ENGINES, so the docs cannot drift from what the tests find."""
    text = (REPO / "docs" / "api.md").read_text()
    begin, end = "<!-- unread-by-engines:begin -->", "<!-- unread-by-engines:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", table, flags=re.MULTILINE))
    assert documented == set(UNREAD_BY_ENGINES), (
        f"docs/api.md lists {sorted(documented)}, the contract tests find "
        f"{sorted(UNREAD_BY_ENGINES)}"
    )
