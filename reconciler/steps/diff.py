"""Pure comparison of a desired object with its live counterpart.

Only the fields we set are compared (the desired object is a *subset* of the live
one): the API server fills in defaults (imagePullPolicy, terminationMessagePath,
clusterIP, protocol, ...) which must never look like drift, or every resync would
write. Quantities are compared by value ("1024Mi" == "1Gi"), since the server
canonicalises them. A field we stopped setting is caught by the spec-hash
annotation, which changes whenever the rendered object does.
"""

from __future__ import annotations

from typing import Any

from shared.objects import meta, metadata
from shared.quantity import parse_quantity
from shared.storage_providers.render import ANNOTATION_SPEC_HASH

_QUANTITY_MAPS = frozenset({"limits", "requests"})


def _quantity_equal(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (ValueError, TypeError):
        return bool(a == b)


def subset_equal(desired: Any, live: Any, parent: str = "") -> bool:
    """True when every field set in ``desired`` has the same value in ``live``."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return not desired and live is None
        if parent in _QUANTITY_MAPS:
            return set(desired) == set(live) and all(
                _quantity_equal(v, live[k]) for k, v in desired.items()
            )
        for key, value in desired.items():
            if key not in live:
                if value in ({}, [], None):
                    continue  # the server drops empty objects/lists
                return False
            if not subset_equal(value, live[key], key):
                return False
        return True
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return not desired and live is None
        return all(subset_equal(d, v, parent) for d, v in zip(desired, live, strict=True))
    return bool(desired == live)


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Whether ``desired`` must be (re-)applied: missing, re-rendered, or drifted."""
    if live is None:
        return True
    live_hash = meta(live).annotations.get(ANNOTATION_SPEC_HASH)
    want_hash = meta(desired).annotations[ANNOTATION_SPEC_HASH]
    if live_hash != want_hash:
        return True
    desired_meta, live_meta = metadata(desired), metadata(live)
    for key in ("labels", "annotations", "ownerReferences"):
        if not subset_equal(desired_meta.get(key), live_meta.get(key), key):
            return True
    if "data" in desired and not subset_equal(desired["data"], live.get("data"), "data"):
        return True  # a Secret's data is outside the hash (shared.storage_providers.render)
    return not subset_equal(desired.get("spec"), live.get("spec"), "spec")
