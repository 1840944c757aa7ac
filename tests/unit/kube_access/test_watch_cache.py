"""The list-then-watch loop and the worker's store: resume, re-list on 410 Gone, and the
changes a re-list after a gap reports (so a deletion missed during the gap is seen)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubeio import client as k
from reconciler.watch import selector_watches
from reconciler.watch.watch_cache import (
    ADDED,
    DELETED,
    MODIFIED,
    Reflector,
    Store,
    WatchSpec,
    changes_between,
    list_then_watch,
)
from tests.builders import NS, replicaset
from tests.builders import listed_pod as pod
from tests.fakes import FakeKube, ScriptedKube, fake_cluster


def test_store_replace_reports_what_changed_against_what_it_held() -> None:
    store = Store()
    store.replace([pod("a", "1"), pod("b", "1"), pod("c", "1")])
    changes = store.replace([pod("a", "1"), pod("b", "2"), pod("d", "1")])
    assert sorted((kind, (old or new or {})["metadata"]["name"]) for kind, old, new in changes) == [
        (ADDED, "d"),
        (DELETED, "c"),
        (MODIFIED, "b"),
    ]
    assert sorted(o["metadata"]["name"] for o in store.all()) == ["a", "b", "d"]
    assert store.in_namespace("other") == []


def test_list_then_watch_pages_lists_and_resumes_from_the_newest_version_bookmarks_included() -> (
    None
):
    kube = ScriptedKube(
        [[pod("a", "5")]],
        [
            [
                {"type": "MODIFIED", "object": pod("a", "120")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "130"}}},
            ],
            [{"type": "DELETED", "object": pod("a", "140")}],
        ],
    )
    events: list[tuple[str, str]] = []
    list_then_watch(
        kube,
        WatchSpec(k.PODS, "app", metadata_only=True),
        on_list=lambda items: events.append(("LIST", str(len(items)))),
        on_event=lambda kind, obj: events.append((kind, obj["metadata"]["resourceVersion"])),
        running=lambda: not kube.done.is_set(),
    )
    assert events == [("LIST", "1"), ("MODIFIED", "120"), ("DELETED", "140")]
    assert kube.list_calls[0] == {"selector": "app", "limit": 500, "metadata_only": True}
    assert [w["rv"] for w in kube.watch_calls[:3]] == ["100", "130", "140"]
    assert all(w["metadata_only"] for w in kube.watch_calls)


def test_reflector_relists_after_410_gone_and_reports_the_changes_missed_in_the_gap() -> None:
    # The stream breaks with 410 Gone: events were lost (here: b was deleted, a was
    # modified, c created). The re-list must surface each as a change.
    kube = ScriptedKube(
        [[pod("a", "1"), pod("b", "1")], [pod("a", "7"), pod("c", "7")]],
        [k.ApiError(410, "Expired", "too old resource version")],
    )
    seen: list[tuple[str, str]] = []
    reflector = Reflector(
        kube,
        WatchSpec(k.PODS),
        on_change=lambda kind, old, new: seen.append(
            (kind, str((new or old or {})["metadata"]["name"]))
        ),
    ).start()
    assert kube.done.wait(5)
    reflector.stop()
    assert reflector.synced.is_set()
    assert sorted(seen) == [(ADDED, "c"), (DELETED, "b"), (MODIFIED, "a")]
    assert sorted(o["metadata"]["name"] for o in reflector.store.all()) == ["a", "c"]
    assert len(kube.list_calls) == 2


def test_reflector_first_list_is_silent_and_watch_events_are_reported_after_the_store_holds_them() -> (
    None
):
    kube = ScriptedKube(
        [[pod("a", "1")]],
        [
            [
                {"type": "ADDED", "object": pod("b", "2")},
                {"type": "DELETED", "object": pod("a", "3")},
            ]
        ],
    )
    reflector: Reflector
    held: list[tuple[str, bool]] = []

    def on_change(kind: str, old: Any, new: Any) -> None:
        name = (new or old)["metadata"]["name"]
        held.append((kind, reflector.store.get("ns", name) is not None))

    reflector = Reflector(kube, WatchSpec(k.PODS), on_change=on_change)
    reflector.start()
    assert kube.done.wait(5)
    reflector.stop()
    assert held == [(ADDED, True), (DELETED, False)]


def test_a_failing_watch_makes_the_store_untrusted_until_the_stream_works_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reflector = Reflector(FakeKube(), WatchSpec(k.PODS))
    reflector.synced.set()
    assert selector_watches.fresh(reflector)
    reflector._restarted("error")
    assert selector_watches.fresh(reflector)  # a blip is tolerated
    monkeypatch.setattr(selector_watches, "STALE_AFTER_SECONDS", 0.0)
    assert not selector_watches.fresh(reflector)
    reflector._progressed("1")  # an event or bookmark arrived: the stream is alive
    assert selector_watches.fresh(reflector)


def test_a_watch_silent_for_several_bookmark_intervals_makes_the_store_untrusted() -> None:
    # The API server sends a bookmark about every minute on a watch that asks for them:
    # a stream that delivers neither events nor bookmarks is open but not delivering.
    reflector = Reflector(FakeKube(), WatchSpec(k.PODS))
    reflector.synced.set()
    reflector._progressed("1")
    assert selector_watches.fresh(reflector)
    assert selector_watches.SILENT_AFTER_SECONDS >= 3 * 60  # bookmarks come every 60-120 s
    reflector.last_progress = time.monotonic() - selector_watches.SILENT_AFTER_SECONDS - 1
    assert not selector_watches.fresh(reflector)
    reflector._progressed("1")  # a bookmark
    assert selector_watches.fresh(reflector)


def test_store_wait_until_returns_once_the_object_shows_the_change() -> None:
    store = Store()
    store.put(pod("a", "1"))
    threading.Timer(0.05, lambda: store.put(pod("a", "2"))).start()
    assert store.wait_until(
        "ns", "a", lambda o: o is not None and o["metadata"]["resourceVersion"] == "2", 5
    )
    assert not store.wait_until("ns", "a", lambda o: o is None, 0.05)


def test_a_stream_that_fails_after_its_watch_was_stopped_ends_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping a watch closes its stream under it (the process or the API server going
    away): that ends the loop without a "watch failed" warning, a restart or a
    back-off, which are for streams that fail while they are wanted."""
    stopped = threading.Event()

    def events() -> Iterator[dict[str, Any]]:
        stopped.set()
        raise ConnectionResetError("closed")
        yield {}  # a generator

    kube = ScriptedKube(lists=[[]], watches=[events()])
    restarts: list[str] = []
    waits: list[float] = []
    with caplog.at_level("WARNING"):
        list_then_watch(
            kube,
            WatchSpec(k.PODS),
            on_list=lambda _items: None,
            on_event=lambda _kind, _obj: None,
            running=lambda: not stopped.is_set(),
            wait=waits.append,
            on_restart=restarts.append,
        )
    assert "watch failed" not in caplog.text
    assert restarts == []
    assert waits == []


def test_a_selector_watch_that_starts_to_serve_reports_what_its_first_list_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The leading dispatcher enqueues on these changes: an engine ReplicaSet created
    # between a backend's read and the first list of the watch its selector asked for
    # must still reach the backend, and a replacement watch reports only what the one
    # it replaces did not hold.
    monkeypatch.setattr(selector_watches, "SELECTOR_SETTLE_SECONDS", 0.01)
    kube = fake_cluster(
        ("replicasets", replicaset("mistral-h1", "mistral", {"app": "mistral"}, replicas=2)),
        ("replicasets", replicaset("llama-h1", "llama", {"app": "llama"}, replicas=1)),
    )
    heard: list[tuple[str, str]] = []
    watches = selector_watches.SelectorWatches(
        kube,
        k.REPLICASETS,
        "engine-replicasets",
        transform=lambda o: o,
        on_change=lambda kind, old, new: heard.append((kind, _name(old, new))),
        on_restart=lambda cause: None,
        watch_timeout=1,
    )
    watches.start()
    try:
        watches.want({(NS, "app"): frozenset({"mistral"})})
        assert watches.serving.wait(5)
        assert heard == [(ADDED, "mistral-h1")]
        watches.want({(NS, "app"): frozenset({"mistral", "llama"})})
        deadline = time.monotonic() + 5
        while len(heard) < 2 and time.monotonic() < deadline:
            watches._dirty.wait(0.05)
        assert heard == [(ADDED, "mistral-h1"), (ADDED, "llama-h1")]
    finally:
        watches.stop()


def test_changes_between_two_holdings_read_as_watch_events() -> None:
    before = [pod("a", "1"), pod("b", "1")]
    after = [pod("b", "2"), pod("c", "1")]
    changes = [(kind, _name(old, new)) for kind, old, new in changes_between(before, after)]
    assert changes == [(MODIFIED, "b"), (ADDED, "c"), (DELETED, "a")]


def _name(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str:
    return str((new or old or {})["metadata"]["name"])
