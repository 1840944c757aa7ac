"""No decision or orchestration function in the product runs past 80 lines.

A function's length is counted from its first decorator (or ``def``) to its last line,
docstring and comments included, the way a reader meets it. Methods and nested
functions count on their own, named ``path:Class.method`` or ``path:outer.inner``.

Argument tables (a run of ``parser.add_argument`` calls) and rule tables may be longer:
they are data, one entry after another, and splitting them would only scatter the
flags of one command. They are listed by name below, each with why.
"""

from __future__ import annotations

import ast
import functools
import textwrap
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
MAX_LINES = 80

# Tables, not logic: each is one parser.add_argument call per flag of one command.
ARGUMENT_TABLES = {
    "icache_install/certs_cli.py:add_arguments",  # the flags of `icache certs`
    "icache_install/doctor/cli.py:add_arguments",  # the flags of `icache doctor`
}


def function_lengths(source: str, path: str) -> dict[str, int]:
    """``path:qualified.name`` -> lines, for every function and method in ``source``."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                name = prefix + child.name
                lengths[f"{path}:{name}"] = (child.end_lineno or child.lineno) - first + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def long_functions(root: Path, packages: tuple[str, ...], limit: int) -> dict[str, int]:
    """Every function of ``packages`` under ``root`` longer than ``limit`` lines."""
    found: dict[str, int] = {}
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            path = file.relative_to(root).as_posix()
            for name, lines in function_lengths(file.read_text(), path).items():
                if lines > limit:
                    found[name] = lines
    return found


@functools.cache
def product_long_functions() -> dict[str, int]:
    """The scan of the product, once per test session (both tests below read it)."""
    return long_functions(REPO, PACKAGES, MAX_LINES)


def test_no_function_past_80_lines_outside_the_allow_lists() -> None:
    found = product_long_functions()
    unexpected = {n: lines for n, lines in found.items() if n not in ARGUMENT_TABLES}
    assert not unexpected, "\n".join(
        ["functions past 80 lines (split them into named helpers):"]
        + [f"  {n}: {lines} lines" for n, lines in sorted(unexpected.items())]
    )


def test_allow_lists_name_only_long_functions() -> None:
    """A stale entry (the function shrank, moved or was renamed) fails, so the lists
    only ever shrink to what is still long."""
    found = product_long_functions()
    stale = sorted((ARGUMENT_TABLES) - set(found))
    assert not stale, f"no longer past 80 lines, remove from the allow-list: {stale}"


def _function(name: str, body_lines: int) -> str:
    body = "\n".join(f"    x{i} = {i}" for i in range(body_lines))
    return f"def {name}():\n{body}\n"


def test_the_count_flags_81_lines_and_passes_80() -> None:
    """The limit is exact: 80 lines pass, 81 fail."""
    source = _function("fits", 79) + _function("too_long", 80)
    lengths = function_lengths(source, "m.py")
    assert lengths == {"m.py:fits": 80, "m.py:too_long": 81}


def test_the_count_covers_methods_nested_functions_and_decorators() -> None:
    source = textwrap.dedent(
        """\
        class C:
            @staticmethod
            @other
            def method():
                def inner():
                    pass
                return inner

        async def coroutine():
            if True:
                def in_branch():
                    pass
        """
    )
    assert function_lengths(source, "m.py") == {
        "m.py:C.method": 6,  # from the first decorator
        "m.py:C.method.inner": 2,
        "m.py:coroutine": 4,
        "m.py:coroutine.in_branch": 2,
    }


def test_long_functions_finds_an_offender_in_a_package(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "m.py").write_text(_function("short", 3) + _function("long", 90))
    assert long_functions(tmp_path, ("pkg",), MAX_LINES) == {"pkg/sub/m.py:long": 91}
