"""The Prometheus series names a release exports, read from its source with ``ast``.

Two ways the engines define metrics, and how each reaches a Prometheus scrape:

- prometheus_client (vLLM's ``vllm:*``, LMCache's in-process ``lmcache:*``, SGLang's
  ``sglang:*``): a ``Counter``/``Gauge``/``Histogram`` (or a wrapper such as LMCache's
  ``_create_counter`` / ``_create_dynamic_gauge`` or vLLM's ``_counter_cls``) called with
  the name. A counter ``X`` is exposed as ``X_total``; a histogram as ``X_bucket``,
  ``X_sum``, ``X_count``; a gauge as ``X``.
- OpenTelemetry (LMCache's MP worker, ``lmcache_mp.*``): ``meter.create_counter(name,
  unit=...)``. The Prometheus exporter (opentelemetry-exporter-prometheus, the
  0.50b0 .. 0.61b0 LMCache allows) replaces every character outside ``[a-zA-Z0-9_:]``
  by ``_``, appends ``_<unit>`` unless the name already ends so (a unit in braces, an
  annotation, is dropped; UCUM ``s``/``ms``/``By`` become ``seconds``/``milliseconds``/
  ``bytes``), and ``_total`` to a counter.

The metric kind is read from the call's function name, so a wrapper counts when its
name says counter, gauge or histogram.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

from tests.engine_contracts.source import SourceTree

PREFIXES: Final = ("vllm:", "lmcache:", "sglang:")
OTEL_PREFIX: Final = "lmcache_mp."
ENGINE_NAME: Final = re.compile(r"^(vllm:|lmcache:|sglang:|lmcache_mp_)")
_UCUM: Final = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": ""}


def _func_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _kind(func: str) -> str | None:
    lowered = func.lower()
    for kind in ("counter", "histogram", "gauge"):
        if kind in lowered:
            return kind
    return None


def prometheus_client_series(name: str, kind: str) -> set[str]:
    """The series a prometheus_client metric ``name`` of ``kind`` is exposed as."""
    if kind == "counter":
        return {name.removesuffix("_total") + "_total"}
    if kind == "histogram":
        return {name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return {name}


def otel_series(name: str, unit: str | None, kind: str) -> set[str]:
    """The series OpenTelemetry's Prometheus exporter makes of an instrument."""
    out = re.sub(r"[^a-zA-Z0-9_:]", "_", name)
    unit = re.sub(r"\{[^}]*\}", "", unit or "")
    unit = _UCUM.get(unit, unit)
    if unit and not out.endswith("_" + unit):
        out += "_" + unit
    if kind == "counter":
        return {out + "_total"}
    if kind == "histogram":
        return {out + suffix for suffix in ("_bucket", "_sum", "_count")}
    return {out}


def _series_of_call(call: ast.Call) -> set[str]:
    func = _func_name(call)
    kind = _kind(func)
    if kind is None:
        return set()
    first = _string(call.args[0]) if call.args else None
    name = _string(_keyword(call, "name")) or first
    if name is None:
        return set()
    if name.startswith(PREFIXES):
        return prometheus_client_series(name, kind)
    if name.startswith(OTEL_PREFIX) and func.startswith("create_"):
        unit_node = _keyword(call, "unit")
        if unit_node is None and len(call.args) > 1:
            unit_node = call.args[1]
        return otel_series(name, _string(unit_node), kind)
    return set()


def exported_series(tree: SourceTree, packages: tuple[str, ...]) -> frozenset[str]:
    """Every engine series the modules under ``packages`` of ``tree`` define."""
    found: set[str] = set()
    for package in packages:
        for path in sorted((tree.root / package).rglob("*.py")):
            found |= _series_in(path)
    return frozenset(found)


def _series_in(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if not any(p in text for p in (*PREFIXES, OTEL_PREFIX)):
        return set()
    try:
        module = ast.parse(text, str(path))
    except SyntaxError:
        return set()
    found: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            found |= _series_of_call(node)
    return found


def engine_names(names: set[str]) -> set[str]:
    """The engines' series among the names a PromQL expression reads."""
    return {n for n in names if ENGINE_NAME.match(n)}
