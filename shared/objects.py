"""One vocabulary for the Kubernetes objects we read: typed views over a raw body.

Objects travel as the JSON the API server sends (plain dicts, so they can be compared,
patched and written back unchanged); what we read of them goes through here instead of
being dug out by hand. ``meta(obj)`` is the object's metadata as a ``Meta`` view
(``meta(pod).name``, ``.namespace``, ``.labels``, ``.annotations``,
``.owner_references``, ``.uid``, ``.resource_version``), total over any input: a
missing or malformed ``metadata`` reads as empty, never raises. The TypedDicts name
the shapes we pass around, for signatures and readers; they check nothing at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, cast


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class RawMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    deletionTimestamp: str


class RawObject(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: RawMeta
    spec: dict[str, Any]
    status: dict[str, Any]


def metadata(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The object's own ``metadata`` dict (writes to it reach the object), or a new
    empty one when it has none or it is not a mapping."""
    raw = obj.get("metadata") if isinstance(obj, Mapping) else None
    return raw if isinstance(raw, dict) else {}


def _text(raw: Mapping[str, Any], key: str) -> str:
    return str(raw.get(key) or "")


def _mapping(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Meta:
    """Read access to one object's metadata (``raw``: the dict itself)."""

    raw: dict[str, Any]

    @property
    def name(self) -> str:
        return _text(self.raw, "name")

    @property
    def generate_name(self) -> str:
        return _text(self.raw, "generateName")

    @property
    def namespace(self) -> str:
        return _text(self.raw, "namespace")

    @property
    def uid(self) -> str:
        return _text(self.raw, "uid")

    @property
    def resource_version(self) -> str:
        return _text(self.raw, "resourceVersion")

    @property
    def deletion_timestamp(self) -> str:
        return _text(self.raw, "deletionTimestamp")

    @property
    def labels(self) -> dict[str, Any]:
        """The object's labels dict itself ({} when it has none)."""
        return _mapping(self.raw, "labels")

    @property
    def annotations(self) -> dict[str, Any]:
        """The object's annotations dict itself ({} when it has none)."""
        return _mapping(self.raw, "annotations")

    @property
    def owner_references(self) -> list[OwnerReference]:
        refs = self.raw.get("ownerReferences")
        if not isinstance(refs, list):
            return []
        return [cast(OwnerReference, r) for r in refs if isinstance(r, dict)]


def meta(obj: RawObject | Mapping[str, Any] | None) -> Meta:
    """A ``Meta`` view of ``obj``'s metadata."""
    return Meta(metadata(obj))
