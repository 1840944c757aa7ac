"""The freshness barrier between the one process that enqueues and the caches that
serve reads (reconciler/watch/freshness.py; docs/decisions.md, "One path from a
change to the work queue"): resourceVersions compared as Kubernetes compares them, the
fence a change leaves, and which of a worker's stores a fence waits on."""

from __future__ import annotations

import pytest

from kubeio import client as k
from reconciler.watch.cluster_cache import ClusterCache
from reconciler.watch.freshness import (
    Fence,
    compare_resource_versions,
    decode_all,
    decode_fence,
    fence_for,
    reached,
)
from reconciler.watch.watch_cache import Reflector
from shared import constants as c
from shared.labels import selector_string_matches
from shared.storage_providers.render import LABEL_CACHEBACKEND
from tests.builders import selected_pod
from tests.fakes import FakeKube


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("1", "1", 0),
        ("9", "10", -1),  # by length first: not lexically
        ("10", "9", 1),
        ("123", "124", -1),
        ("0", "1", None),  # zero is the list/watch "any" value, never a version
        ("01", "1", None),  # leading zeros are not well formed
        ("a1", "1", None),
        ("", "1", None),
        ("\u0661", "1", None),  # a non-ASCII digit is not well formed either
    ],
)
def test_resource_versions_compare_as_the_api_machinery_compares_them(
    a: str, b: str, order: int | None
) -> None:
    assert compare_resource_versions(a, b) == order


def test_a_stream_reached_a_version_only_once_it_delivered_it_or_a_newer_one() -> None:
    assert reached("12", "12")
    assert reached("100", "99")
    assert not reached("11", "12")
    assert not reached(None, "12")  # nothing listed yet
    assert not reached("12", "garbage")  # cannot be checked: never passed


def test_a_fence_carries_the_object_its_version_and_its_labels_and_reads_back() -> None:
    pod = selected_pod("ns", "p", {"app": "vllm"})
    pod["metadata"]["resourceVersion"] = "42"
    fence = fence_for(k.PODS.plural, pod)
    assert fence == Fence("pods", "ns", "p", "42", {"app": "vllm"})
    assert fence.field == "pods/ns/p"
    assert decode_fence(fence.field, fence.encode()) == fence
    assert decode_all({fence.field: fence.encode()}) == [fence]
    assert decode_all({fence.field: "not json"}) is None  # unreadable: read live
    assert decode_all({"pods": fence.encode()}) is None
    del pod["metadata"]["resourceVersion"]
    assert fence_for(k.PODS.plural, pod) is None


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {}, True),
        ("app", {"app": ""}, True),
        ("app", {"other": "x"}, False),
        ("app in (a,b)", {"app": "b"}, True),
        ("app in (a,b)", {"app": "c"}, False),
        ("app notin (a),tier", {"app": "b", "tier": "x"}, True),
        ("app.kubernetes.io/managed-by=inference-cache", {"x": "y"}, False),
        ("a=1,b!=2", {"a": "1", "b": "3"}, True),
        ("!a", {"a": "1"}, False),
    ],
)
def test_a_watch_selector_string_is_evaluated_as_the_api_server_does(
    selector: str | None, labels: dict[str, str], matches: bool
) -> None:
    assert selector_string_matches(selector, labels) is matches


def _synced(reflector: Reflector, delivered: str) -> Reflector:
    reflector.synced.set()
    reflector._progressed(delivered)
    return reflector


def test_a_fence_waits_on_the_stores_that_select_or_hold_its_object_and_no_other() -> None:
    cache = ClusterCache(FakeKube())  # not started: its stores are driven by hand
    _synced(cache.server_pods, "10")
    _synced(cache.injected_pods, "10")
    engine = Fence("pods", "ns", "p", "20", {"app": "vllm"})
    # No store selects or holds an unlabelled engine pod (no engine selector watched):
    # nothing to wait for, though both pod stores are behind version 20.
    assert cache.stores_holding(engine) == []
    assert cache.caught_up([engine], timeout=0.1)

    injected = Fence("pods", "ns", "p", "20", {c.LABEL_INJECTED_BY_UID: "u"})
    assert cache.stores_holding(injected) == [cache.injected_pods]
    assert not cache.caught_up([injected], timeout=0.1)  # the store has not got there
    cache.injected_pods._progressed("20")
    assert cache.caught_up([injected], timeout=0.1)

    # A server pod whose label was removed: the store still holds it and waits for the
    # deletion the label change is to it.
    held = selected_pod("ns", "s", {LABEL_CACHEBACKEND: "cb"})
    cache.server_pods.store.put(held)
    unlabelled = Fence("pods", "ns", "s", "30", {})
    assert cache.stores_holding(unlabelled) == [cache.server_pods]
    assert not cache.caught_up([unlabelled], timeout=0.1)


def test_a_store_that_has_not_listed_is_waited_for_and_a_failing_one_is_not() -> None:
    cache = ClusterCache(FakeKube())
    backend = Fence("cachebackends", "ns", "cb", "5")
    assert not cache.caught_up([backend], timeout=0.1)  # not listed: its list may predate
    _synced(cache.backends, "5")
    assert cache.caught_up([backend], timeout=0.1)
    behind = Fence("cachebackends", "ns", "cb", "6")
    cache.backends.failing_since = 0.0  # failing for ages: its reads go live anyway
    assert cache.caught_up([behind], timeout=0.1)
