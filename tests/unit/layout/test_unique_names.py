"""No two public classes or functions of the product share a name: a name says which
module it comes from, so a search for it finds one definition.

Public: a module-level ``def``/``class`` whose name does not start with ``_``. The
subcommand interface (every ``icache`` subcommand module's ``add_arguments`` and
``run``) is one protocol by design and is the only exception.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = (
    "shared",
    "kubeio",
    "cli_support",
    "icache_cli",
    "webhook_svc",
    "reconciler",
    "icache_install",
)
SUBCOMMAND_INTERFACE = frozenset({"add_arguments", "settings_from", "run"})


def public_names(root: Path, packages: tuple[str, ...]) -> dict[str, list[str]]:
    """Public module-level name -> the modules (paths) that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                if isinstance(node, definition) and not node.name.startswith("_"):
                    found[node.name].append(str(path.relative_to(root)))
    return found


def shared_names(root: Path, packages: tuple[str, ...]) -> dict[str, list[str]]:
    return {n: ps for n, ps in public_names(root, packages).items() if len(ps) > 1}


def test_the_counter_finds_a_name_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.py").write_text("def select():\n    pass\n\nclass _Hidden:\n    pass\n")
    (tmp_path / "p" / "b.py").write_text("class select:\n    pass\n\ndef _hidden():\n    pass\n")
    assert shared_names(tmp_path, ("p",)) == {"select": ["p/a.py", "p/b.py"]}


def test_no_two_public_names_are_the_same() -> None:
    shared = shared_names(REPO, PACKAGES)
    unexpected = {n: ps for n, ps in shared.items() if n not in SUBCOMMAND_INTERFACE}
    assert not unexpected, f"public names defined in more than one module: {unexpected}"
