"""End to end, real processes: the leading dispatcher is the one process that adds to
the work queue, and a run it wakes reads a worker cache that holds the change
(docs/decisions.md, "Layout: one path from a change to the work queue"; the freshness
barrier in docs/architecture.md, "Staleness").

The resync is set far beyond the test, so every status change below is carried by a
watch event the dispatcher turned into an add: a pod entering and leaving an engine
selector, and an engine ReplicaSet's scale, which before only the workers' caches
turned into an add. The worker's caches pass every fence in time: not one run falls
back to the API server (``read="behind-dispatcher"``)."""

from __future__ import annotations

import re
import urllib.request

from kubeio import client as k
from tests.builders import NO_GATE
from tests.e2e.conftest import (
    Cluster,
    Stack,
    create_pod,
    engine_deployment_as_the_controller_leaves_it,
    matched,
    selector_message,
)
from tests.harness.controlplane import free_port

# Longer than the test: no resync ever runs, only the dispatcher's event adds.
NO_RESYNC_SECONDS = 3600.0
BEHIND = re.compile(
    r'^inferencecache_worker_cache_live_reads_total\{read="behind-dispatcher"\} (\S+)$', re.M
)


def _behind_dispatcher(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        match = BEHIND.search(resp.read().decode())
    assert match, "the worker exports the behind-dispatcher read"
    return float(match.group(1))


def test_event_adds_alone_carry_changes_to_the_status_read_from_the_cache(
    cluster: Cluster, stack: Stack
) -> None:
    stack.resync_period = NO_RESYNC_SECONDS
    port = free_port()
    stack.start_dispatcher()
    stack.start_worker(extra=["--metrics-port", str(port)])
    ns = cluster.namespace()
    spec = {"runtime": "VLLM", "engineSelector": {"matchLabels": {"app": "mistral"}}}
    cluster.create_cb(ns, "cb", spec, NO_GATE)
    cluster.wait_cb(ns, "cb", lambda o: matched(o) == 0, "the backend reconciled")

    # A pod entering and leaving the selector: the dispatcher's pod watch.
    create_pod(cluster, ns, "m-0", {}, labels={"app": "mistral"})
    cluster.wait_cb(ns, "cb", lambda o: matched(o) == 1, "the pod counted")
    cluster.kube.patch(
        k.PODS, ns, "m-0", {"metadata": {"labels": {"app": "other"}}}, content_type=k.MERGE_PATCH
    )
    cluster.wait_cb(ns, "cb", lambda o: matched(o) == 0, "the relabelled pod dropped")

    # With no pod matching, the message says so until an engine Deployment the selector
    # matches is scaled to zero, and again once it is scaled up: the dispatcher's
    # engine-ReplicaSet watch (its first list, then a watch event).
    assert "matches no Pods" in selector_message(cluster.kube.get(k.CACHEBACKENDS, ns, "cb"))
    engine_deployment_as_the_controller_leaves_it(cluster, ns, "mistral", "mistral", 0)
    cluster.wait_cb(ns, "cb", lambda o: selector_message(o) == "", "scaled to zero: no message")
    cluster.kube.patch(
        k.REPLICASETS,
        ns,
        "mistral-h1",
        {"metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": "2"}}},
        content_type=k.MERGE_PATCH,
    )
    cluster.wait_cb(
        ns, "cb", lambda o: "matches no Pods" in selector_message(o), "scaled up: message"
    )

    assert _behind_dispatcher(port) == 0
