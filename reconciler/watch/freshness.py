"""Fences: how a reconcile woken by the dispatcher knows the worker's caches have seen
the change that woke it.

Only the leading dispatcher adds keys to the work queue; a worker reads from its own
watch caches, which hear the same change on their own streams, a moment earlier or
later. With each add the dispatcher leaves a fence beside the key: the object whose
change woke it (resource, namespace, name, labels) and the resourceVersion the change
carried. Before a run reads its caches, the worker waits, for a bounded time, until
every store that holds or selects that object has delivered that version or a newer
one of the same resource; a run whose stores do not get there in time reads the API
server instead (reconciler/work/tasks.py).

resourceVersions of one resource are compared as Kubernetes compares them
(k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion: positive
decimal integers without leading zeros, by length, then lexically); a version that is
not well formed is never called caught up, so the run reads the API server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.backend_keys import object_key
from shared.objects import metadata


def _well_formed(rv: str) -> bool:
    return bool(rv) and rv[0] != "0" and rv.isascii() and rv.isdigit()


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b`` (two versions
    of one resource); None when either is not a well-formed resourceVersion."""
    if not (_well_formed(a) and _well_formed(b)):
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def reached(seen: str | None, wanted: str) -> bool:
    """A stream that has delivered ``seen`` has delivered every change of its resource
    up to ``wanted``."""
    if seen is None:
        return False
    order = compare_resource_versions(seen, wanted)
    return order is not None and order >= 0


@dataclass(frozen=True)
class Fence:
    """The change a work-queue add was made for: an object of ``resource`` (its plural)
    at ``resource_version``, with the labels it carried then."""

    resource: str
    namespace: str
    name: str
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def field(self) -> str:
        """Its field in the key's fence hash: one per object, the newest change wins."""
        return f"{self.resource}/{self.namespace}/{self.name}"

    def encode(self) -> str:
        return json.dumps(
            {"rv": self.resource_version, "labels": dict(self.labels)}, sort_keys=True
        )


def fence_for(resource: str, obj: Mapping[str, Any]) -> Fence | None:
    """The fence of a watched object's change; None when it carries no version."""
    meta = metadata(obj)
    rv = str(meta.get("resourceVersion") or "")
    if not rv:
        return None
    namespace, name = object_key(dict(obj))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return Fence(resource, namespace, name, rv, labels)


def decode_fence(field_name: str, value: str) -> Fence | None:
    """A fence read back from the work queue; None when it cannot be read."""
    resource, sep1, rest = field_name.partition("/")
    namespace, sep2, name = rest.partition("/")
    if not (sep1 and sep2 and resource and name):
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("rv"), str):
        return None
    raw = data.get("labels")
    labels = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    return Fence(resource, namespace, name, data["rv"], labels)


def decode_all(raw: Mapping[str, str]) -> list[Fence] | None:
    """Every fence of a key; None when one cannot be read (the run reads the API
    server: a fence it cannot check is one it cannot call passed)."""
    fences = [decode_fence(f, v) for f, v in sorted(raw.items())]
    if any(f is None for f in fences):
        return None
    return [f for f in fences if f is not None]
