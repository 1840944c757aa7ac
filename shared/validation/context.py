"""What a rule may look at: the object as it would be stored, its namespace and annotations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from shared.api.defaults import with_spec_defaults
from shared.api.models import CacheBackendSpec
from shared.objects import metadata
from shared.validation.resource_entries import ResourceEntry, judged_entries, selected_entries
from shared.validation.schema import drop_nulls
from shared.validation.vocabulary import ResourceKind

# ----------------------------------------------------------------------- context


@dataclass(frozen=True)
class RuleContext:
    """What a rule may look at. ``raw`` has the CRD's schema defaults applied."""

    spec: CacheBackendSpec | None
    raw: Mapping[str, Any]
    namespace: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def parsed(self) -> CacheBackendSpec:
        """The parsed spec; only rules with ``needs_spec`` (the default) use it."""
        if self.spec is None:
            raise RuntimeError("rule needs a parsed spec but none is available")
        return self.spec

    # The resource rules all read the selected provider's entries: parsed once per
    # object, not once per rule.
    @cached_property
    def resource_entries(self) -> tuple[ResourceEntry, ...]:
        return tuple(selected_entries(self.parsed))

    @cached_property
    def judged_resource_entries(self) -> tuple[tuple[ResourceEntry, ResourceKind, Decimal], ...]:
        return tuple(judged_entries(self.resource_entries))

    @property
    def raw_spec(self) -> Mapping[str, Any]:
        spec = self.raw.get("spec")
        return spec if isinstance(spec, Mapping) else {}


def namespace_of(raw: Mapping[str, Any], namespace: str) -> str:
    """The request namespace, else metadata.namespace, else "default" (as kubectl would)."""
    if namespace:
        return namespace
    ns = metadata(raw).get("namespace")
    return ns if isinstance(ns, str) and ns else "default"


def backend_annotations(raw: Mapping[str, Any]) -> Mapping[str, str]:
    annotations = metadata(raw).get("annotations")
    if not isinstance(annotations, Mapping):
        return {}
    return {k: v for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)}


def _without_null_spec_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with null properties under .spec pruned, as the API server does; the
    spec is a fresh deep copy (``drop_nulls``), the rest is shared with ``obj``."""
    out = dict(obj)
    if isinstance(out.get("spec"), dict):
        out["spec"] = drop_nulls(out["spec"])
    return out


def judged_form(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the rules judge: null spec properties pruned, then the schema's defaults
    applied (to the pruned copy, so ``obj`` is never changed, and with one copy of the
    spec instead of two)."""
    return with_spec_defaults(_without_null_spec_fields(obj))
