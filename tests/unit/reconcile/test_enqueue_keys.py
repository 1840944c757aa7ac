"""One rule decides which backends a change concerns (reconciler/watch/enqueue_keys.py),
and only the leading dispatcher applies it (docs/decisions.md, "One path from a change
to the work queue"): a pod's entering or leaving an engine selector, the backend it
names (pod_change_keys), and an engine ReplicaSet's change of what an engine
Deployment is derived from (replicaset_change_keys)."""

from __future__ import annotations

from typing import Any

from reconciler.watch.engine_deployments import replicaset_metadata
from reconciler.watch.enqueue_keys import SelectorIndex, pod_change_keys
from tests.builders import replicaset, selected_pod, selector_cb

Obj = dict[str, Any]


BACKENDS = [
    selector_cb("ns", "a", {"app": "vllm"}),
    selector_cb("ns", "b", {"app": "vllm", "tier": "x"}),
    selector_cb("ns", "q", {"app": "qwen"}),
]


def _index() -> SelectorIndex:
    index = SelectorIndex()
    index.reset_backends(BACKENDS)
    return index


def test_the_rule_is_the_selector_difference_and_the_backend_the_pod_names() -> None:
    pod = selected_pod("ns", "p", {"app": "vllm"}, injected="ns/a")
    assert pod_change_keys(frozenset({"ns/a"}), frozenset({"ns/a", "ns/b"}), []) == {"ns/b"}
    assert pod_change_keys(frozenset({"ns/a"}), frozenset({"ns/a"}), [pod]) == {"ns/a"}
    assert pod_change_keys(frozenset(), frozenset(), [None]) == frozenset()


def test_an_engine_replicaset_wakes_its_selecting_backends_only_when_its_shape_changes() -> None:
    index = _index()
    rs = replicaset_metadata(replicaset("d-1", "d", {"app": "qwen"}, replicas=2, namespace="ns"))
    status_only = {**rs, "metadata": {**rs["metadata"], "resourceVersion": "2"}}
    assert index.replicaset_changed(rs, status_only) == frozenset()
    scaled = replicaset_metadata(
        replicaset("d-1", "d", {"app": "qwen"}, replicas=0, namespace="ns")
    )
    assert index.replicaset_changed(rs, scaled) == {"ns/q"}
    relabelled = replicaset_metadata(
        replicaset("d-1", "d", {"app": "vllm"}, replicas=2, namespace="ns")
    )
    assert index.replicaset_changed(rs, relabelled) == {"ns/q", "ns/a"}
    assert index.replicaset_changed(None, rs) == {"ns/q"}  # created
    assert index.replicaset_changed(rs, None) == {"ns/q"}  # deleted


def test_the_engine_selector_groups_follow_the_backends() -> None:
    index = _index()
    assert index.groups() == {("ns", "app"): frozenset({"vllm", "qwen"})}
    assert index.set_backend(selector_cb("ns", "q", {"app": "qwen"})) is False  # unchanged
    assert index.set_backend(selector_cb("ns", "q", {"app": "qwen"}), deleted=True) is True
    assert index.groups() == {("ns", "app"): frozenset({"vllm"})}
