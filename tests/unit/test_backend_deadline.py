"""Issue 9 item 5: the CacheBackend lookup has a hard budget well inside the Pod
webhook's timeoutSeconds, so the fail-open answer reaches the API server in time."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from icache_install.manifests_cli import render
from webhook_svc.backend_source import DEFAULT_LIST_TIMEOUT_SECONDS, DeadlineSource


class Blocked:
    """A source whose list waits until released: an API server that never answers."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def list(self, namespace: str) -> list[dict[str, Any]]:
        self.release.wait(30)
        return [{"metadata": {"namespace": namespace}}]


def test_a_list_past_its_budget_raises_timeout_while_the_call_still_hangs() -> None:
    source = Blocked()
    with pytest.raises(TimeoutError, match=r"within 0\.05 s"):
        DeadlineSource(source, 0.05).list("ns")
    assert not source.release.is_set()
    source.release.set()


def test_a_list_inside_its_budget_passes_the_items_through() -> None:
    source = Blocked()
    source.release.set()
    assert DeadlineSource(source, 5).list("ns") == [{"metadata": {"namespace": "ns"}}]


def test_the_default_budget_is_well_inside_the_pod_webhook_timeout() -> None:
    (pod_hook,) = [
        w
        for d in render()
        if d["kind"] == "MutatingWebhookConfiguration"
        for w in d["webhooks"]
        if w["name"] == "mpod.inferencecache.io"
    ]
    assert pod_hook["timeoutSeconds"] / 2 >= DEFAULT_LIST_TIMEOUT_SECONDS
