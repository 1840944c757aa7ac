"""Apply the CRD's literal defaults to a raw object, the way the API server does.

The API server defaults a property only when its parent object is present; the
defaulting webhook materialises ``spec.integration`` and ``spec.observation`` so
their nested defaults have a parent. Validation judges a replayed manifest as if it
had been applied, so it runs this first.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from shared.api.crd import spec_openapi_schema
from shared.jsoncopy import json_copy


@dataclass(frozen=True)
class _Plan:
    """Where a schema node's defaults are: its own properties' defaults, the properties
    with defaults somewhere below, and the same for map values and list items. Nodes
    with no default below them are left out, so applying walks only what can change
    (the CRD schema is large and most of it has no defaults)."""

    defaults: tuple[tuple[str, Any], ...]
    children: tuple[tuple[str, _Plan], ...]
    values: _Plan | None  # additionalProperties
    items: _Plan | None


def _compile(schema: Any) -> _Plan | None:
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    defaults = tuple((name, prop["default"]) for name, prop in props.items() if "default" in prop)
    children = tuple(
        (name, plan) for name, prop in props.items() if (plan := _compile(prop)) is not None
    )
    values = _compile(schema.get("additionalProperties"))
    items = _compile(schema.get("items"))
    if not (defaults or children or values or items):
        return None
    return _Plan(defaults, children, values, items)


@functools.cache
def _plan(part: str) -> _Plan | None:
    schema = spec_openapi_schema()
    return _compile(schema if part == "" else schema["properties"][part])


def _apply(plan: _Plan, value: Any) -> None:
    """Stamp the schema defaults onto ``value`` in place, as the API server does: a
    property is defaulted when absent and its parent object is present."""
    if isinstance(value, dict):
        for name, default in plan.defaults:
            if name not in value:
                value[name] = json_copy(default)
        for name, child in plan.children:
            if name in value:
                _apply(child, value[name])
        if plan.values is not None:
            for item in value.values():
                _apply(plan.values, item)
    elif isinstance(value, list) and plan.items is not None:
        for item in value:
            _apply(plan.items, item)


def with_spec_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """Every schema default applied to an object whose ``spec`` the caller already owns
    (a fresh copy, such as ``drop_nulls`` returns): only ``spec`` is defaulted, in place,
    and the rest is shared with ``obj``, not copied. Every default of the schema is under
    ``spec`` (tests/unit/admission/test_defaulting.py checks it), so the whole object is defaulted."""
    out = dict(obj)
    spec = out.get("spec")
    plan = _plan("spec")
    if isinstance(spec, dict) and plan is not None:
        _apply(plan, spec)
    return out
