"""Read a release's Python source with ``ast``: modules, constants, argparse flags.

Pure: nothing of the engine is imported (the engines need torch and CUDA). A
``SourceTree`` is one release's ``src/`` directory (tests/engine_contracts/cache.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any


class Unresolved:
    """A value the reader could not work out statically (a call, a comprehension ...)."""

    def __repr__(self) -> str:
        return "<unresolved>"


UNRESOLVED: Any = Unresolved()


@dataclass(frozen=True)
class Flag:
    """One command-line option as argparse would register it."""

    names: tuple[str, ...]
    # False for store_true / BooleanOptionalAction / store_const flags.
    takes_value: bool = True
    # "int", "float", "str", "json", "bool", another callable's name, or None (str).
    type: str | None = None
    # The allowed values; None when argparse checks none (or they are not static).
    choices: tuple[str, ...] | None = None
    # True when ``choices`` exist but could not be resolved statically.
    choices_unresolved: bool = False


class SourceTree:
    """The ``.py`` files of one release, addressed by dotted module name."""

    def __init__(self, root: Path, label: str = "") -> None:
        self.root = root
        self.label = label or root.name
        self._parsed: dict[str, ast.Module] = {}

    # ------------------------------------------------------------------ modules

    def module_path(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def has_module(self, module: str) -> bool:
        return self.module_path(module) is not None

    def parse(self, module: str) -> ast.Module:
        if module not in self._parsed:
            path = self.module_path(module)
            if path is None:
                raise FileNotFoundError(f"{self.label}: no module {module}")
            self._parsed[module] = ast.parse(path.read_text(encoding="utf-8"), str(path))
        return self._parsed[module]

    def modules_under(self, package: str) -> list[str]:
        """Dotted names of the ``.py`` modules directly in ``package``."""
        directory = self.root.joinpath(*package.split("."))
        if not directory.is_dir():
            return []
        return [
            f"{package}.{p.stem}" for p in sorted(directory.glob("*.py")) if p.name != "__init__.py"
        ]

    @cached_property
    def text(self) -> str:
        """Every ``.py`` file's text, joined: for "is this name mentioned anywhere"."""
        return "\n".join(
            p.read_text(encoding="utf-8", errors="replace") for p in sorted(self.root.rglob("*.py"))
        )

    @cached_property
    def identifier_strings(self) -> frozenset[str]:
        """Every quoted identifier-like string (``"LMCACHE_CHUNK_SIZE"``) in the release."""
        return frozenset(re.findall(r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']", self.text))

    def mentions_string(self, value: str) -> bool:
        """True when ``value`` appears as a whole string literal somewhere in the release."""
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            return value in self.identifier_strings
        return f'"{value}"' in self.text or f"'{value}'" in self.text

    # ---------------------------------------------------------------- names

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        path = self.module_path(module)
        is_package = path is not None and path.name == "__init__.py"
        parts = module.split(".")
        base = parts if is_package else parts[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join([*base, *([node.module] if node.module else [])])

    def imported(self, module: str, name: str) -> tuple[str, str] | None:
        """(module, name) a ``from X import name [as alias]`` in ``module`` points at."""
        for node in self.parse(module).body:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self._absolute(module, node), alias.name
        return None

    def top_level(self, module: str, name: str) -> ast.AST | None:
        """The module-level def, class or assigned value named ``name``."""
        for node in self.parse(module).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                return node
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                return node.value
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
                and node.value is not None
            ):
                return node.value
        return None

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """(defining module, node) of ``name`` as seen from ``module``, through imports."""
        node = self.top_level(module, name)
        if node is not None:
            return module, node
        target = self.imported(module, name)
        if target is None or depth > 8 or not self.has_module(target[0]):
            return None
        return self.lookup(target[0], target[1], depth + 1)

    def literal(self, module: str, node: ast.AST | None, depth: int = 0) -> Any:
        """``node``'s value when it is a literal, or names / containers of literals."""
        if node is None or depth > 10:
            return UNRESOLVED
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self.literal(module, e, depth + 1) for e in node.elts]
            return UNRESOLVED if any(i is UNRESOLVED for i in items) else items
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values, strict=True):
                key = self.literal(module, k, depth + 1)
                if key is UNRESOLVED:
                    return UNRESOLVED
                out[key] = self.literal(module, v, depth + 1)
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.literal(module, node.left, depth + 1)
            right = self.literal(module, node.right, depth + 1)
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            return UNRESOLVED
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("list", "tuple", "set", "frozenset", "sorted") and node.args:
                return self.literal(module, node.args[0], depth + 1)
            return UNRESOLVED
        if isinstance(node, ast.Name):
            found = self.lookup(module, node.id)
            if found is None or isinstance(found[1], ast.FunctionDef | ast.ClassDef):
                return UNRESOLVED
            return self.literal(found[0], found[1], depth + 1)
        return UNRESOLVED

    def literal_choices(self, module: str, node: ast.AST | None, depth: int = 0) -> set[str]:
        """The strings of a ``Literal[...]`` annotation (aliases followed), else empty."""
        if node is None or depth > 10:
            return set()
        if isinstance(node, ast.Subscript):
            head = ast.unparse(node.value).rsplit(".", 1)[-1]
            inner = node.slice
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            out: set[str] = set()
            for elt in elts:
                if head == "Literal" and isinstance(elt, ast.Constant):
                    out.add(str(elt.value))
                else:
                    out |= self.literal_choices(module, elt, depth + 1)
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.literal_choices(module, node.left, depth + 1) | self.literal_choices(
                module, node.right, depth + 1
            )
        if isinstance(node, ast.Name):
            found = self.lookup(module, node.id)
            if found is not None and not isinstance(found[1], ast.FunctionDef | ast.ClassDef):
                return self.literal_choices(found[0], found[1], depth + 1)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                return self.literal_choices(module, ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                return set()
        return set()

    # -------------------------------------------------------------- classes

    def class_def(self, module: str, name: str) -> tuple[str, ast.ClassDef] | None:
        found = self.lookup(module, name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        return found[0], found[1]

    def class_fields(self, module: str, name: str) -> dict[str, ast.expr]:
        """Annotated class attributes (dataclass / pydantic / msgspec fields), bases first."""
        found = self.class_def(module, name)
        if found is None:
            return {}
        where, cls = found
        fields: dict[str, ast.expr] = {}
        for base in cls.bases:
            if isinstance(base, ast.Name):
                fields |= self.class_fields(where, base.id)
        for node in cls.body:
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and "ClassVar" not in ast.unparse(node.annotation)
            ):
                fields[node.target.id] = node.annotation
        return fields

    def method(self, module: str, cls: str, name: str) -> ast.FunctionDef | None:
        found = self.class_def(module, cls)
        if found is None:
            return None
        for node in found[1].body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        return None

    # -------------------------------------------------------------- argparse

    def argparse_flags(self, module: str, entry: str | None = None) -> dict[str, Flag]:
        """Every option ``add_argument`` registers from ``entry`` on, following calls to
        functions of the release (``"func"``, ``"Class.method"``; None: the module's
        ``if __name__ == "__main__":`` block). Keyed by every option string."""
        flags: dict[str, Flag] = {}
        seen: set[tuple[str, str]] = set()
        if entry is None:
            roots: list[ast.AST] = [
                n
                for n in self.parse(module).body
                if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)
            ]
        else:
            node = self._callable(module, entry)
            roots = [node[1]] if node else []
        for root in roots:
            self._collect_flags(module, root, flags, seen)
        return flags

    def _callable(self, module: str, dotted: str) -> tuple[str, ast.FunctionDef] | None:
        if "." in dotted:
            cls, _, name = dotted.partition(".")
            found = self.class_def(module, cls)
            if found is None:
                return None
            method = self.method(found[0], cls, name)
            return (found[0], method) if method else None
        hit = self.lookup(module, dotted)
        if hit is not None and isinstance(hit[1], ast.FunctionDef):
            return hit[0], hit[1]
        return None

    def _collect_flags(
        self,
        module: str,
        root: ast.AST,
        flags: dict[str, Flag],
        seen: set[tuple[str, str]],
    ) -> None:
        for node in ast.walk(root):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "add_argument":
                flag = self._flag(module, node)
                if flag is not None:
                    for name in flag.names:
                        flags[name] = flag
                continue
            target = None
            if isinstance(func, ast.Name):
                target = self._callable(module, func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                target = self._callable(module, f"{func.value.id}.{func.attr}")
            if target is not None:
                key = (target[0], f"{target[1].name}@{target[1].lineno}")
                if key not in seen:
                    seen.add(key)
                    self._collect_flags(target[0], target[1], flags, seen)

    def _flag(self, module: str, call: ast.Call) -> Flag | None:
        names = tuple(
            a.value
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        )
        if not names:
            return None
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        action = ast.unparse(kw["action"]) if "action" in kw else ""
        takes_value = (
            not any(
                a in action for a in ("store_true", "store_false", "BooleanOptionalAction", "count")
            )
            and action.strip("'\"") != "store_const"
        )
        type_name = ast.unparse(kw["type"]).rsplit(".", 1)[-1] if "type" in kw else None
        choices: tuple[str, ...] | None = None
        unresolved = False
        if "choices" in kw:
            value = self.literal(module, kw["choices"])
            if value is UNRESOLVED or not isinstance(value, list):
                unresolved = True
            else:
                choices = tuple(str(v) for v in value)
        return Flag(
            names=names,
            takes_value=takes_value,
            type="bool" if not takes_value else type_name,
            choices=choices,
            choices_unresolved=unresolved,
        )


def calls_named(root: ast.AST, attr: str) -> list[ast.Call]:
    """Calls of ``x.attr(...)`` or ``attr(...)`` under ``root``."""
    out = []
    for node in ast.walk(root):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == attr:
                out.append(node)
    return out


def first_string_arg(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None
