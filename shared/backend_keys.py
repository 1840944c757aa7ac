"""Object keys: the namespace and name of a namespaced object, and their ``ns/name`` text.

A CacheBackend's key is what the work queue holds, what a reconcile is handed, what
the injected-by annotation names and what logs show; the watch caches' stores index
every object by the same pair. The text form is built (``str``) and read (``parse``)
here only, and so is the rule that a pod was wired by one backend incarnation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from shared import constants as c
from shared.objects import meta, metadata


class BackendKey(NamedTuple):
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> BackendKey | None:
        """``ns/name`` (both parts non-empty; the name keeps any later ``/``), else None."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name:
            return None
        return cls(namespace, name)


def object_key(obj: Mapping[str, Any]) -> BackendKey:
    """The key of any namespaced object (missing parts read as "")."""
    view = meta(obj)
    return BackendKey(view.namespace, view.name)


def injected_by_key(pod: dict[str, Any]) -> BackendKey | None:
    """The backend a pod's injected-by annotation names, when it is in the pod's own
    namespace (the webhook only wires a pod to a backend of its namespace, so a claim
    naming another one was not written by it)."""
    raw_meta = metadata(pod)
    injected = str((raw_meta.get("annotations") or {}).get(c.ANNOTATION_INJECTED_BY) or "")
    key = BackendKey.parse(injected)
    return key if key is not None and key.namespace == raw_meta.get("namespace") else None


def injected_by_backend(pod: Mapping[str, Any], namespace: str, name: str, uid: str | None) -> bool:
    """The webhook wired this pod to exactly this backend incarnation: its injected-by
    annotation names the backend's key AND its injected-by-uid the backend's live uid
    (a backend deleted and created again under the same name does not own the pods the
    old one wired)."""
    if not uid:
        return False
    annotations = meta(pod).annotations
    return (
        annotations.get(c.ANNOTATION_INJECTED_BY) == str(BackendKey(namespace, name))
        and annotations.get(c.ANNOTATION_INJECTED_BY_UID) == uid
    )


def injected_by(pod: Mapping[str, Any], backend: Mapping[str, Any]) -> bool:
    """``injected_by_backend`` for a backend given as its wire form."""
    view = meta(backend)
    return injected_by_backend(pod, view.namespace, view.name, view.uid)
