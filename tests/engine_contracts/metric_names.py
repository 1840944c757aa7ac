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

vLLM's KV offloading (``vllm:kv_offload_*``, vLLM 0.33 on) names its series by class
constants (``CPUOffloadingMetrics.STORES_SKIPPED = "vllm:kv_offload_stores_skipped"``)
and declares each in a dict, constant -> ``OffloadingCounterMetadata(...)`` /
``OffloadingGaugeMetadata`` / ``OffloadingHistogramMetadata``, which
``OffloadPromMetrics._create_metric`` turns into the prometheus_client metric of that
kind (vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py). The reader
resolves such a key through the string constants of the package's classes and modules.

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
# vLLM's offloading metric declarations: OffloadingCounterMetadata and its siblings.
METADATA_SUFFIX: Final = "Metadata"
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
    modules = [
        module
        for package in packages
        for path in sorted((tree.root / package).rglob("*.py"))
        if (module := _parsed(path)) is not None
    ]
    constants = _string_constants(modules)
    found: set[str] = set()
    for module in modules:
        for node in ast.walk(module):
            if isinstance(node, ast.Call):
                found |= _series_of_call(node)
        found |= _declared_series(module, constants)
    return frozenset(found)


def _parsed(path: Path) -> ast.Module | None:
    """The module, when it may name an engine series (a name, or a metadata declaration)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if not any(p in text for p in (*PREFIXES, OTEL_PREFIX, METADATA_SUFFIX + "(")):
        return None
    try:
        return ast.parse(text, str(path))
    except SyntaxError:
        return None


def _string_constants(modules: list[ast.Module]) -> dict[str, str]:
    """``NAME`` and ``Class.NAME`` -> the engine series name assigned to it, over all
    ``modules``; a key assigned two different names is left out (not resolvable)."""
    seen: dict[str, set[str]] = {}

    def record(key: str, value: ast.AST) -> None:
        name = _string(value)
        if name is not None and name.startswith(PREFIXES):
            seen.setdefault(key, set()).add(name)

    for module in modules:
        for node in module.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                record(node.targets[0].id, node.value)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                        record(f"{node.name}.{item.targets[0].id}", item.value)
    return {key: next(iter(names)) for key, names in seen.items() if len(names) == 1}


def _constant_key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _declared_kind(value: ast.AST) -> str | None:
    """The kind a ``Offloading<Kind>Metadata(...)`` declaration makes, else None."""
    if not isinstance(value, ast.Call):
        return None
    func = _func_name(value)
    return _kind(func) if func.endswith(METADATA_SUFFIX) else None


def _declared_series(module: ast.Module, constants: dict[str, str]) -> set[str]:
    """The series declared as ``{NAME: Offloading<Kind>Metadata(...)}`` or
    ``definitions[NAME] = Offloading<Kind>Metadata(...)`` in ``module``."""
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Dict):
            pairs += [(k, v) for k, v in zip(node.keys, node.values, strict=True) if k]
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            pairs.append((node.targets[0].slice, node.value))
    found: set[str] = set()
    for key, value in pairs:
        kind = _declared_kind(value)
        ref = _constant_key(key)
        name = _string(key) or (constants.get(ref) if ref else None)
        if kind and name and name.startswith(PREFIXES):
            found |= prometheus_client_series(name, kind)
    return found


def engine_names(names: set[str]) -> set[str]:
    """The engines' series among the names a PromQL expression reads."""
    return {n for n in names if ENGINE_NAME.match(n)}
