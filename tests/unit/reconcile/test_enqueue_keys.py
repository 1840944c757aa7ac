"""One rule decides which backends a pod change concerns (reconciler/watch/enqueue_keys.py:
pod_change_keys), wherever the change is seen: the leading dispatcher's pod watch
(SelectorIndex, which remembers each pod's previous matches) and a worker's caches
(ChangeRouter, handed the old and new object) give the same keys for the same change
(docs/decisions.md, "One rule from a change to the keys it wakes")."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.watch.enqueue_keys import ChangeRouter, SelectorIndex, pod_change_keys
from tests.builders import selected_pod, selector_cb

Obj = dict[str, Any]


BACKENDS = [
    selector_cb("ns", "a", {"app": "vllm"}),
    selector_cb("ns", "b", {"app": "vllm", "tier": "x"}),
]


class _Store:
    def in_namespace(self, namespace: str) -> list[Obj]:
        return BACKENDS if namespace == "ns" else []


def test_the_rule_is_the_selector_difference_and_the_backend_the_pod_names() -> None:
    pod = selected_pod("ns", "p", {"app": "vllm"}, injected="ns/a")
    assert pod_change_keys(frozenset({"ns/a"}), frozenset({"ns/a", "ns/b"}), []) == {"ns/b"}
    assert pod_change_keys(frozenset({"ns/a"}), frozenset({"ns/a"}), [pod]) == {"ns/a"}
    assert pod_change_keys(frozenset(), frozenset(), [None]) == frozenset()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (None, selected_pod("ns", "p", {"app": "vllm"})),
        (
            selected_pod("ns", "p", {"app": "vllm"}),
            selected_pod("ns", "p", {"app": "vllm", "tier": "x"}),
        ),
        (
            selected_pod("ns", "p", {"app": "vllm", "tier": "x"}),
            selected_pod("ns", "p", {"app": "sglang"}),
        ),
        (
            selected_pod("ns", "p", {"app": "vllm"}),
            selected_pod("ns", "p", {"app": "vllm"}, injected="ns/a"),
        ),
    ],
    ids=["created", "enters-b", "leaves-both", "annotated-by-a"],
)
def test_the_dispatcher_and_a_worker_cache_wake_the_same_backends(
    old: Obj | None, new: Obj
) -> None:
    index = SelectorIndex()
    index.reset_backends(BACKENDS)
    if old is not None:
        index.pod_changed("ADDED", old)
    dispatcher_keys = index.pod_changed("MODIFIED", new)
    woken: list[str] = []
    ChangeRouter(_Store(), woken.append).engine_pod("MODIFIED", old, new)
    assert set(woken) == set(dispatcher_keys)
    assert dispatcher_keys  # each case concerns some backend
