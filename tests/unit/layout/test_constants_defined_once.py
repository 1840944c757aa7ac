"""Each literal constant of the product has one home.

The rule (team guide, "every public name defined once", applied to constants): an
ALL_CAPS module-level name bound to a literal is defined in one module of the product
packages; every other module imports it. Where two meanings share a name (the build's
"unknown" and a condition's "Unknown" status), one of them is renamed, so a reader
never has to ask which of two ``UNKNOWN`` a line means.

"Literal" is read from each module's syntax tree: a value ``ast.literal_eval``
accepts (strings, numbers, tuples, dicts, sets of those), or an f-string or
operator expression built only from literals and names (``f"{c.PLURAL}.{c.GROUP}"``:
a second copy of it is a second home of the same fact). A call (``frozenset(...)``,
``TypeVar(...)``) is not a literal constant.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = (
    "shared",
    "kubeio",
    "cli_support",
    "reconciler",
    "webhook_svc",
    "icache_cli",
    "icache_install",
)


def _is_constant_name(name: str) -> bool:
    return not name.startswith("_") and name.upper() == name and any(ch.isalpha() for ch in name)


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    else:
        return True
    if isinstance(node, ast.JoinedStr):
        return all(
            isinstance(v, ast.Constant)
            or (isinstance(v, ast.FormattedValue) and _is_operand(v.value))
            for v in node.values
        )
    if isinstance(node, ast.BinOp):
        return _is_operand(node.left) and _is_operand(node.right)
    return False


def _is_operand(node: ast.expr) -> bool:
    """A name, an attribute of one, or a literal: what a literal expression joins."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _is_operand(node.value)
    return _is_literal(node)


def literal_constants(source: str) -> list[tuple[str, int]]:
    """The ALL_CAPS module-level names ``source`` binds to a literal, with their lines."""
    found: list[tuple[str, int]] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not _is_literal(value):
            continue
        found += [
            (t.id, node.lineno)
            for t in targets
            if isinstance(t, ast.Name) and _is_constant_name(t.id)
        ]
    return found


def homes(modules: dict[str, str]) -> dict[str, list[str]]:
    """Each literal constant's name -> the modules (``path:line``) defining it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, source in sorted(modules.items()):
        for name, line in literal_constants(source):
            where[name].append(f"{path}:{line}")
    return where


def test_the_rule_sees_literals_fstrings_and_ignores_calls_and_private_names() -> None:
    """The check can fail: a string, a dict and an f-string of names count; a call, a
    private name and a lower-case name do not."""
    modules = {
        "a.py": 'X = "x"\nY: Final = {"k": 1}\nZ = f"{c.A}.{c.B}"\nT = TypeVar("T")\n',
        "b.py": 'X = "other"\nZ = f"{c.A}.{c.B}"\n_Y = 1\nT = TypeVar("T")\nlower = 1\n',
    }
    twice = {name: where for name, where in homes(modules).items() if len(where) > 1}
    assert twice == {"X": ["a.py:1", "b.py:1"], "Z": ["a.py:3", "b.py:2"]}


def test_every_literal_constant_of_the_product_is_defined_in_one_module() -> None:
    modules = {
        str(path.relative_to(ROOT)): path.read_text()
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    twice = {name: where for name, where in homes(modules).items() if len(where) > 1}
    assert twice == {}, "\n".join(f"{name}: {', '.join(w)}" for name, w in sorted(twice.items()))
