"""One CacheBackend value (shared/api/backend.py): the raw object and its model, read once.

The reconcile pass writes the status back onto ``raw`` unchanged apart from .status, so
``raw`` must be the object as sent (fields the model does not know included); the Pod
webhook judges a backend on what wiring reads, so controller-owned status fields never
make it invalid.
"""

from __future__ import annotations

import pydantic
import pytest

from shared.api.backend import read_backend, read_backend_for_wiring
from shared.backend_keys import BackendKey
from tests.builders import backend


def test_read_backend_keeps_the_raw_object_and_reads_key_and_uid_once() -> None:
    raw = backend("cache", namespace="team-a")
    raw["metadata"]["uid"] = "u-1"
    raw["metadata"]["futureField"] = {"kept": True}
    raw["status"] = {"conditions": [], "observedServerInstance": "i-1"}
    value = read_backend(raw)
    assert value.raw is raw
    assert value.key == BackendKey("team-a", "cache")
    assert value.uid == "u-1"
    assert value.status["observedServerInstance"] == "i-1"
    assert value.model.spec.runtime == raw["spec"]["runtime"]


def test_no_uid_and_no_status_read_as_none_and_empty() -> None:
    raw = backend("cache")
    del raw["metadata"]["uid"]
    value = read_backend(raw)
    assert value.uid is None
    assert value.status == {}


def test_an_unreadable_stored_object_is_a_validation_error() -> None:
    raw = backend("cache")
    raw["spec"]["runtime"] = {"not": "a runtime"}
    with pytest.raises(pydantic.ValidationError):
        read_backend(raw)


def test_wiring_ignores_controller_status_and_fills_the_pods_namespace() -> None:
    """Spec, Pod webhook: wiring reads metadata, spec and status.endpoint only."""
    raw = backend("cache", namespace=None, status_endpoint="redis://r:6379")
    raw["status"]["conditions"] = "not a list: a newer controller's shape"
    value = read_backend_for_wiring(raw, "team-b")
    assert value.key == BackendKey("team-b", "cache")
    assert value.model.metadata.namespace == "team-b"
    assert value.model.status is not None
    assert value.model.status.endpoint == "redis://r:6379"
    with pytest.raises(pydantic.ValidationError):
        read_backend(raw)
