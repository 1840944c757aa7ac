"""One CacheBackend value: the object as the API server sent it and its typed model.

The reconcile pass and the Pod webhook carry a ``Backend`` instead of a raw dict and a
parsed model side by side. ``raw`` is what is compared, patched and written back
unchanged (the status write keeps every field the model does not know); ``model`` is
what the rules read; ``key`` and ``uid`` are read once, from the raw metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.api.models import CacheBackend
from shared.backend_keys import BackendKey
from shared.objects import meta


@dataclass(frozen=True)
class Backend:
    raw: dict[str, Any]
    model: CacheBackend
    key: BackendKey

    @property
    def uid(self) -> str | None:
        return meta(self.raw).uid or None

    @property
    def status(self) -> dict[str, Any]:
        """The stored status as sent (empty when there is none)."""
        status = self.raw.get("status")
        return status if isinstance(status, dict) else {}


def read_backend(raw: dict[str, Any]) -> Backend:
    """The whole stored object parsed; ``pydantic.ValidationError`` when it cannot be."""
    view = meta(raw)
    return Backend(raw, CacheBackend.model_validate(raw), BackendKey(view.namespace, view.name))


def read_backend_for_wiring(raw: dict[str, Any], namespace: str | None = None) -> Backend:
    """The backend judged on what wiring reads: metadata, spec and status.endpoint.

    Other status fields (conditions, index participation, ...) are the controller's and
    never affect wiring, so a partial or newer status must not make the backend
    invalid. ``namespace`` (the pod's), when given, stands in for a missing
    metadata.namespace.
    ``pydantic.ValidationError`` when the rest cannot be parsed.
    """
    status = raw.get("status")
    trimmed: dict[str, Any] = {
        key: raw[key] for key in ("apiVersion", "kind", "metadata", "spec") if key in raw
    }
    if isinstance(status, dict) and "endpoint" in status:
        trimmed["status"] = {"endpoint": status["endpoint"]}
    model = CacheBackend.model_validate(trimmed)
    if model.metadata.namespace is None and namespace is not None:
        model.metadata.namespace = namespace
    return Backend(raw, model, BackendKey(model.metadata.namespace or "", meta(raw).name))
