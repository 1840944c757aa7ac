"""webhook_svc/ in rooms: at most 12 modules flat, and its HTTP and process layer
(webhook_svc/http/) below the admission logic, importing none of it (the same rule as
the import-linter contract in pyproject.toml, here for modules added later too)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WEBHOOK = REPO / "webhook_svc"
FLAT_LIMIT = 12


def imported(source: str) -> set[str]:
    """The modules ``source`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def upward(source: str) -> set[str]:
    """What of the webhook outside webhook_svc/http/ ``source`` imports."""
    return {
        m
        for m in imported(source)
        if m.startswith("webhook_svc.")
        and not m.startswith("webhook_svc.http")
        and m != "webhook_svc"
    }


def test_the_import_reader_sees_an_upward_import() -> None:
    source = "from webhook_svc import app\nfrom webhook_svc.http.codec import encode_json\n"
    assert upward(source) == {"webhook_svc.app"}
    assert upward("import json\nfrom webhook_svc.http import codec\n") == set()


def test_the_webhook_holds_at_most_twelve_modules_flat() -> None:
    flat = sorted(p.name for p in WEBHOOK.glob("*.py"))
    assert len(flat) <= FLAT_LIMIT, f"webhook_svc/ holds {len(flat)} modules flat: {flat}"


def test_the_http_layer_imports_no_admission_module() -> None:
    wrong = {
        str(path.relative_to(REPO)): sorted(found)
        for path in sorted((WEBHOOK / "http").rglob("*.py"))
        if (found := upward(path.read_text()))
    }
    assert not wrong, f"webhook_svc/http/ imports the admission logic: {wrong}"
