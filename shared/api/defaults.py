"""Apply the CRD's literal defaults to a raw object, the way the API server does.

The API server defaults a property only when its parent object is present; the
defaulting webhook materialises ``spec.integration`` and ``spec.observation`` so
their nested defaults have a parent. Validation judges a replayed manifest as if it
had been applied, so it runs this first.
"""

from __future__ import annotations

from typing import Any

from shared.api.crd import spec_openapi_schema
from shared.jsoncopy import json_copy


def _apply(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for name, prop in props.items():
                if name not in value and "default" in prop:
                    value[name] = json_copy(prop["default"])
                if name in value:
                    _apply(prop, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _apply(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _apply(schema["items"], item)


def with_schema_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a CacheBackend object with every schema default applied."""
    out = json_copy(obj)
    _apply(spec_openapi_schema(), out)
    return out


def with_spec_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """``with_schema_defaults`` for an object whose ``spec`` the caller already owns (a
    fresh copy, such as ``drop_nulls`` returns): only ``spec`` is defaulted, in place, and
    the rest is shared with ``obj``, not copied. Every default of the schema is under
    ``spec`` (tests/unit/test_defaulting.py checks it), so the result is the same."""
    out = dict(obj)
    spec = out.get("spec")
    if isinstance(spec, dict):
        _apply(spec_openapi_schema()["properties"]["spec"], spec)
    return out
