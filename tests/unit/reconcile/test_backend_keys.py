"""The work-queue key of a CacheBackend (``ns/name``) and the injected-by claim a pod
carries: built and read in shared.backend_keys only."""

from __future__ import annotations

from shared.backend_keys import BackendKey, injected_by_key, object_key
from tests.builders import claiming_pod as pod


def test_the_text_form_round_trips_and_keeps_a_slash_in_the_name() -> None:
    assert str(BackendKey("ns", "cb")) == "ns/cb"
    assert BackendKey.parse("ns/cb") == BackendKey("ns", "cb")
    assert BackendKey.parse("ns/a/b") == BackendKey("ns", "a/b")
    for bad in ("", "ns", "ns/", "/cb"):
        assert BackendKey.parse(bad) is None, bad


def test_object_key_reads_metadata_and_missing_parts_as_empty() -> None:
    assert object_key({"metadata": {"namespace": "ns", "name": "x"}}) == ("ns", "x")
    assert object_key({}) == ("", "")


def test_an_injected_by_claim_counts_only_in_the_pods_own_namespace() -> None:
    """The webhook wires a pod only to a backend of the pod's namespace."""

    assert injected_by_key(pod("ns", "ns/cb")) == BackendKey("ns", "cb")
    assert injected_by_key(pod("ns", "other/cb")) is None
    assert injected_by_key(pod("ns", "cb")) is None
    assert injected_by_key({"metadata": {"namespace": "ns"}}) is None
