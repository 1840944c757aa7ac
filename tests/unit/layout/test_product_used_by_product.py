"""No product code only tests call: every public function or class the product
defines is referenced by the product itself (by name, as a call, an attribute, a
decorator or a dotted module-table string), so what the docs and a newcomer read as
running does run. Code a test needs as an oracle or a builder lives under tests/.

Public: a module-level ``def``/``class`` whose name does not start with ``_``. A
reference is any use of the name in a product module other than its own definition;
an import alone and a name listed in ``__all__`` do not count (a re-export is not a
use). Entry points that only something outside the product calls are allowed below,
each with its reason.
"""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PRODUCT = (
    "shared",
    "kubeio",
    "cli_support",
    "icache_cli",
    "webhook_svc",
    "reconciler",
    "icache_install",
)


def console_scripts(pyproject: Path) -> set[str]:
    """Functions the installed console scripts call (``module:function``): the
    operating system runs them, not another product module."""
    scripts = tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {})
    return {target.split(":")[-1] for target in scripts.values()}


def _exported(tree: ast.Module) -> set[int]:
    """The nodes of ``__all__`` assignments: a name listed there is not used."""
    skipped: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skipped |= {id(n) for n in ast.walk(node)}
    return skipped


def references(tree: ast.Module) -> Counter[str]:
    """Every name a module uses: names, attributes, and the last part of a dotted
    identifier string (the console script's module table names modules that way)."""
    skipped = _exported(tree)
    found: Counter[str] = Counter()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Name):
            found[node.id] += 1
        elif isinstance(node, ast.Attribute):
            found[node.attr] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split(".")
            if all(part.isidentifier() for part in parts):
                found[parts[-1]] += 1
    return found


def unused_definitions(root: Path, packages: Iterable[str]) -> list[str]:
    """``path:name`` of each public definition no module under ``root/packages`` uses."""
    definitions: list[tuple[str, str]] = []
    used: Counter[str] = Counter()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            used += references(tree)
            for node in tree.body:
                kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                if isinstance(node, kinds) and not node.name.startswith("_"):
                    definitions.append((str(path.relative_to(root)), node.name))
    return [f"{path}:{name}" for path, name in definitions if used[name] == 0]


def test_the_finder_sees_a_definition_only_tests_use(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.py").write_text(
        "def used():\n    pass\n\ndef orphan():\n    pass\n\n__all__ = ['orphan']\n"
    )
    (tmp_path / "p" / "b.py").write_text(
        "from p.a import orphan, used\n\nMODULES = {'x': 'p.c.run'}\n\ndef caller():\n    used()\n"
    )
    (tmp_path / "p" / "c.py").write_text("def run():\n    pass\n")
    assert unused_definitions(tmp_path, ("p",)) == ["p/a.py:orphan", "p/b.py:caller"]


def test_every_public_definition_of_the_product_is_used_by_the_product() -> None:
    """Rule (docs/decisions.md, "Layout"): no product code only tests call. Delete
    it, or make the product use it; a test's oracle or builder lives under tests/."""
    allowed = console_scripts(REPO / "pyproject.toml")
    unused = [d for d in unused_definitions(REPO, PRODUCT) if d.split(":")[1] not in allowed]
    assert not unused, f"product definitions no product module uses: {unused}"
