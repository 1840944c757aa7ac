"""End to end: the engine pods' kernel-check verdicts report their installed lmcache and
vLLM releases, and the worker compares them with the LMCache server it provisions.

Rules (docs/api.md "Conditions", "Events"; docs/metrics.md): LMCacheVersionSkew on a
Managed LMCacheServer backend (server version = the image tag, v0.4.7 by default;
compared in major.minor), one Warning Event on entering the skew, the leading
dispatcher's ``inferencecache_backend_lmcache_version_skew{backend}`` gauge, and
EngineVersionBelowMinimum beside it; neither ever changes Ready.

The managed server really rolls out (kube-controller-manager, kube-scheduler, kwok); the
engine pods stay unbound and the test writes the kernel-check termination their kubelet
would report (a verdict per scenario: a matching client, a skewed one, none, and one from
before verdicts carried versions).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeio import client as k
from shared import engine_versions as ev
from tests.builders import MANAGED_VLLM_SPEC as MANAGED
from tests.builders import NO_GATE
from tests.e2e.conftest import (
    KERNEL_CHECK,
    Cluster,
    Stack,
    condition,
    create_pod,
    injected,
    poll,
    scrape_metrics,
    set_pod_status,
)
from tests.e2e.workloads import wait_rolled_out
from tests.harness.controlplane import free_port

SKEW = "LMCacheVersionSkew"
BELOW = "EngineVersionBelowMinimum"


def gauge(port: int, backend: str) -> float | None:
    prefix = f'inferencecache_backend_lmcache_version_skew{{backend="{backend}"}} '
    for line in scrape_metrics(port).splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


def verdict(versions: dict[str, str] | None) -> str:
    """The check's verdict: ``versions`` None is a verdict from before the field."""
    body: dict[str, Any] = {"mode": "report-only", "result": "ok", "error": ""}
    if versions is not None:
        body["extension"] = "lmcache.c_ops"
        body["versions"] = versions
    return json.dumps(body, sort_keys=True)


def engine(cluster: Cluster, ns: str, cb: dict[str, Any], name: str, message: str) -> None:
    """An injected engine pod whose kernel check finished with ``message``."""
    create_pod(cluster, ns, name, injected(cb, "report-only"), kernel_check=True)
    set_pod_status(
        cluster,
        ns,
        name,
        {"initContainerStatuses": [{"name": KERNEL_CHECK, "ready": False, "restartCount": 0,
                                    "image": "engine:1", "imageID": "",
                                    "state": {"terminated": {"exitCode": 0,
                                                             "message": message}}}]},
    )  # fmt: skip


def message_of(obj: dict[str, Any], type_: str) -> str:
    for cond in obj["status"]["conditions"]:
        if cond["type"] == type_:
            return str(cond["message"])
    raise AssertionError(f"no {type_} condition")


def event_count(cluster: Cluster, ns: str, reason: str) -> int:
    return sum(1 for e in cluster.events(ns, "cb") if e.get("reason") == reason)


@pytest.mark.real_controllers
def test_client_versions_against_the_managed_lmcache_server(cluster: Cluster, stack: Stack) -> None:
    port = free_port()
    stack.start_dispatcher(extra=["--metrics-port", str(port)])
    stack.start_worker()
    ns = cluster.namespace()
    backend = f"{ns}/cb"
    cb = cluster.create_cb(ns, "cb", MANAGED, NO_GATE)
    wait_rolled_out(cluster, ns, "Deployment", "cb-lmcache-server")
    cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady", timeout=60)
    assert poll(lambda: gauge(port, backend) == 0.0, timeout=60, what="the gauge at 0")

    # None reported: a client pip-installed at engine start (versions without lmcache)
    # and a verdict from before versions were reported.
    engine(cluster, ns, cb, "e-none", verdict({"vllm": "0.11.0", "torch": "2.8.0"}))
    engine(cluster, ns, cb, "e-old", verdict(None))
    # Both pods counted: the worker may publish between the two creations.
    obj = cluster.wait_cb(
        ns,
        "cb",
        lambda o: (
            condition(o, SKEW) == ("Unknown", "ClientVersionUnknown")
            and "e-none, e-old" in message_of(o, SKEW)
        ),
        "ClientVersionUnknown naming e-none and e-old",
        timeout=60,
    )
    assert condition(obj, "Ready") == ("True", "BackendReady")
    assert condition(obj, "EngineKernelsHealthy") == ("True", "KernelsHealthy")

    # A matching client (0.4.x against the default lmcache/standalone:v0.4.7).
    engine(cluster, ns, cb, "e-match", verdict({"lmcache": "0.4.7", "vllm": "0.11.0"}))
    obj = cluster.wait_condition(ns, "cb", SKEW, "False", "VersionsAligned", timeout=60)
    aligned = message_of(obj, SKEW)
    assert "e-match (lmcache 0.4.7)" in aligned
    assert "lmcache/standalone:v0.4.7" in aligned
    assert "Not reported by e-none, e-old" in aligned
    assert condition(obj, "Ready") == ("True", "BackendReady")
    assert condition(obj, BELOW) == ("False", "ReleasesAtMinimum")
    assert event_count(cluster, ns, "LMCacheVersionSkew") == 0

    # A skewed client: the condition, one Warning Event, the gauge; Ready unchanged.
    engine(cluster, ns, cb, "e-skew", verdict({"lmcache": "0.5.6", "vllm": "0.33.0"}))
    obj = cluster.wait_condition(ns, "cb", SKEW, "True", "ClientServerVersionSkew", timeout=60)
    skewed = message_of(obj, SKEW)
    assert "e-skew (lmcache 0.5.6)" in skewed
    assert "e-match (lmcache 0.4.7)" in skewed
    assert "is lmcache 0.4.7" in skewed
    assert condition(obj, "Ready") == ("True", "BackendReady")
    assert condition(obj, "Degraded") == ("False", "NotDegraded")
    poll(
        lambda: event_count(cluster, ns, "LMCacheVersionSkew") == 1,
        timeout=60,
        what="the LMCacheVersionSkew Event",
    )
    event = next(e for e in cluster.events(ns, "cb") if e["reason"] == "LMCacheVersionSkew")
    assert event["type"] == "Warning"
    assert "e-skew (lmcache 0.5.6)" in event["message"]
    poll(lambda: gauge(port, backend) == 1.0, timeout=60, what="the skew gauge at 1")

    # Still skewed with another pod, which also runs a vLLM below the proven minimum:
    # the skew is no new Event; the minimum warning is its own, once.
    old_vllm = "0.10.1"
    assert ev.older_than(old_vllm, ev.minimum_for("VLLM", "LMCache", "LMCacheServer")["vllm"])
    engine(cluster, ns, cb, "e-skew2", verdict({"lmcache": "0.5.1", "vllm": old_vllm}))
    obj = cluster.wait_condition(ns, "cb", BELOW, "True", "ReleaseBelowMinimum", timeout=60)
    assert f"e-skew2 (vllm {old_vllm} <" in message_of(obj, BELOW)
    obj = cluster.wait_cb(
        ns,
        "cb",
        lambda o: "e-skew2 (lmcache 0.5.1)" in message_of(o, SKEW),
        "e-skew2 listed",
        timeout=60,
    )
    assert condition(obj, SKEW) == ("True", "ClientServerVersionSkew")
    assert condition(obj, "Ready") == ("True", "BackendReady")
    poll(
        lambda: event_count(cluster, ns, "EngineVersionBelowMinimum") == 1,
        timeout=60,
        what="the EngineVersionBelowMinimum Event",
    )
    assert event_count(cluster, ns, "LMCacheVersionSkew") == 1

    # The server moves to the clients' release: aligned again, the gauge back to 0.
    cluster.patch_cb(
        ns,
        "cb",
        {"spec": {"remoteStorage": {"lmCacheServer": {"image": "lmcache/standalone:v0.5.6"}}}},
    )
    obj = cluster.wait_condition(ns, "cb", SKEW, "True", "ClientServerVersionSkew", timeout=60)
    assert "e-match (lmcache 0.4.7)" in message_of(obj, SKEW)
    cluster.kube.delete(k.PODS, ns, "e-match")
    obj = cluster.wait_condition(ns, "cb", SKEW, "False", "VersionsAligned", timeout=60)
    poll(lambda: gauge(port, backend) == 0.0, timeout=60, what="the skew gauge back at 0")
    assert event_count(cluster, ns, "LMCacheVersionSkew") == 1

    # A server pinned by digest has no version to compare: said so, never guessed.
    digest = "lmcache/standalone@sha256:" + "0" * 64
    cluster.patch_cb(ns, "cb", {"spec": {"remoteStorage": {"lmCacheServer": {"image": digest}}}})
    obj = cluster.wait_condition(ns, "cb", SKEW, "Unknown", "ServerVersionUnknown", timeout=60)
    assert digest in message_of(obj, SKEW)
    poll(lambda: gauge(port, backend) == 0.0, timeout=60, what="the skew gauge at 0")
