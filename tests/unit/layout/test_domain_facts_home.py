"""Domain facts have their home in the core, and the reconciler stays in rooms.

Decisions (docs/decisions.md, "Layout"): every condition type, condition reason and
Event reason is a constant of ``shared/constants.py``, so the reconciler and doctor
read one definition and doctor defines none of its own; the backend key, its
``ns/name`` text and the injected-by rule are ``shared/backend_keys.py``'s. (That no
directory holds more than 20 modules is tests/unit/layout/test_directory_size.py's.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# Condition types (COND_), condition reasons (REASON_) and Event reasons (EVENT_).
STATUS_VOCABULARY = re.compile(r"^(COND|REASON|EVENT)_[A-Z0-9_]+$")


def status_vocabulary_defined(source: str) -> list[str]:
    """Names of module-level constants that look like a condition type or reason."""
    names = []
    for node in ast.parse(source).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names += [
            t.id for t in targets if isinstance(t, ast.Name) and STATUS_VOCABULARY.match(t.id)
        ]
    return names


def test_the_scan_sees_a_reason_defined_outside_the_core() -> None:
    """The scan can fail: a reason, a condition type and an Event reason are seen."""
    source = 'REASON_X = "X"\nCOND_Y: Final = "Y"\nEVENT_Z = "Z"\nOTHER = 1\n'
    assert status_vocabulary_defined(source) == ["REASON_X", "COND_Y", "EVENT_Z"]


@pytest.mark.parametrize("package", ["reconciler", "icache_install"])
def test_no_condition_or_event_reason_is_defined_outside_the_core(package: str) -> None:
    """Decision "Layout": condition types and reasons and Event reasons live in
    shared/constants.py; the reconciler and doctor import them."""
    found = {
        str(path.relative_to(REPO)): names
        for path in sorted((REPO / package).rglob("*.py"))
        if (names := status_vocabulary_defined(path.read_text()))
    }
    assert found == {}


def test_the_backend_key_and_the_injected_by_rule_are_the_cores() -> None:
    """Decision "Layout": the key, its text form and the injected-by rule are defined in
    shared/backend_keys.py and nowhere in the reconciler or doctor."""
    defined = {"BackendKey", "object_key", "injected_by_backend", "injected_by"}
    elsewhere = []
    for package in ("reconciler", "icache_install"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in defined:
                    elsewhere.append(f"{path.relative_to(REPO)}:{node.name}")
    assert elsewhere == []
    core = {
        node.name
        for node in ast.parse((REPO / "shared" / "backend_keys.py").read_text()).body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    assert defined <= core
