"""`icache admit-pod` gives the verdicts of the real Pod webhook, called by the real API
server, for every workload kind of a multi-document input.

The backends are read back from the API server (``kubectl get cb -o yaml``: uids and
status included) into the directory admit-pod reads; each workload's pod is created
with dryRun=All through the API server, and the offline report must agree with the
pod the API server returns: wired or not, by which backend (and uid), with the same
containers, arguments and environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from shared import constants as c
from tests.builders import new_cb
from tests.harness.controlplane import ControlPlane, wait_until
from tests.webhook_process import ICACHE, labelled_namespace, registered, run_webhook
from webhook_svc.offline.admit_pod_cli import pod_of

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
SUFFIX = "admitpod"
SUBSCRIBER = "ghcr.io/inference-cache/kvevent-subscriber:0.1.0"
VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"


def _template(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "vllm", "image": VLLM_IMAGE, "args": ["--model", "m"]}]},
    }


def _workloads(ns: str) -> list[dict[str, Any]]:
    def wl(kind: str, name: str, template: dict[str, Any]) -> dict[str, Any]:
        api = {"CronJob": "batch/v1", "Job": "batch/v1"}.get(kind, "apps/v1")
        spec: dict[str, Any] = {"template": template}
        if kind == "CronJob":
            spec = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
        return {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "namespace": ns, "labels": {"app": "host"}},
        "spec": _template({"app": "host"})["spec"],
    }
    return [
        wl("Deployment", "host", _template({"app": "host"})),
        wl("StatefulSet", "managed", _template({"app": "managed"})),
        wl("DaemonSet", "pending", _template({"app": "pending"})),
        wl("Job", "nomatch", _template({"app": "other"})),
        wl("CronJob", "optout", _template({"app": "host"}, {c.ANNOTATION_SKIP_INJECT: "true"})),
        wl("ReplicaSet", "events", _template({"app": "events"})),
        pod,
    ]


@pytest.fixture(scope="module")
def admit_ns(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[str]:
    with (
        run_webhook(
            control_plane.kubeconfig_path, ["--kvevent-subscriber-image", SUBSCRIBER]
        ) as hook,
        registered(kube_api_client, hook, SUFFIX),
    ):
        ns = labelled_namespace(kube_api_client, f"admit-{uuid.uuid4().hex[:6]}", SUFFIX)
        custom: Any = client.CustomObjectsApi(kube_api_client)
        managed = {"provider": "LMCacheServer", "ownership": "Managed"}
        for body in (
            new_cb("a-host", {"app": "host"}, observation={"modelID": "m"}),
            new_cb("b-managed", {"app": "managed"}, remoteStorage=managed),
            new_cb("c-pending", {"app": "pending"}, remoteStorage=managed),
            new_cb(
                "d-events",
                {"app": "events"},
                integration={"mode": "EventsOnly"},
                observation={"modelID": "m"},
            ),
        ):
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "b-managed")
        stored["status"] = {"endpoint": f"b-managed-lmcache.{ns}.svc:65432"}
        custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, "b-managed", stored
        )
        core: Any = client.CoreV1Api(kube_api_client)

        def webhook_wires() -> bool:
            probe = pod_of(_workloads(ns)[0], ns)
            got = core.create_namespaced_pod(ns, probe, dry_run="All")
            return c.ANNOTATION_INJECTED_BY in (got.metadata.annotations or {})

        wait_until(webhook_wires, timeout=30, description="the API server calls the Pod webhook")
        yield ns


def _engine(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod["spec"]["containers"]
    return {
        "containers": [x["name"] for x in containers],
        "init": [x["name"] for x in pod["spec"].get("initContainers") or []],
        "args": containers[0].get("args"),
        "env": {e["name"]: e.get("value") for e in containers[0].get("env") or []},
        "hostNetwork": bool(pod["spec"].get("hostNetwork")),
    }


def test_admit_pod_agrees_with_the_live_pod_webhook(
    kube_api_client: client.ApiClient, admit_ns: str, tmp_path: Path
) -> None:
    """Spec "Mutating Pod webhook": selection, injection, fail-open and skip-inject."""
    custom: Any = client.CustomObjectsApi(kube_api_client)
    listing = custom.list_namespaced_custom_object(GROUP, VERSION, admit_ns, PLURAL)
    backends = tmp_path / "backends"
    backends.mkdir()
    (backends / "cb.yaml").write_text(yaml.safe_dump(listing))
    workloads = _workloads(admit_ns)
    manifest = tmp_path / "workloads.yaml"
    manifest.write_text(yaml.safe_dump_all(workloads))
    done = subprocess.run(
        [
            ICACHE,
            "admit-pod",
            "-f",
            str(manifest),
            "--backends-from",
            str(backends),
            "--kvevent-subscriber-image",
            SUBSCRIBER,
            "-o",
            "json",
            "--fail-on-unwired",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # nomatch and pending are unwired
    assert "Traceback" not in done.stderr
    report = {r["name"]: r for r in json.loads(done.stdout)}
    assert set(report) == {w["metadata"]["name"] for w in workloads}

    core: Any = client.CoreV1Api(kube_api_client)
    for workload in workloads:
        offline = report[workload["metadata"]["name"]]
        pod = pod_of(workload, admit_ns)
        live = kube_api_client.sanitize_for_serialization(
            core.create_namespaced_pod(admit_ns, pod, dry_run="All")
        )
        annotations = live["metadata"].get("annotations") or {}
        injected_by = annotations.get(c.ANNOTATION_INJECTED_BY)
        assert offline["wired"] is (injected_by is not None), (workload["kind"], offline)
        if injected_by:
            assert offline["backend"] == injected_by
        expected = json.loads(json.dumps(pod))
        for op in offline["patch"]:
            expected = _apply(expected, op)
        offline_annotations = expected["metadata"].get("annotations") or {}
        for key in (
            c.ANNOTATION_INJECTED_BY,
            c.ANNOTATION_INJECTED_BY_UID,
            c.ANNOTATION_INJECT_SKIPPED,
        ):
            assert offline_annotations.get(key) == annotations.get(key), (workload["kind"], key)
        assert _engine(expected) == _engine(live), workload["kind"]
    assert "outcome=fail_open reason=missing_endpoint" in done.stderr
    assert "would be admitted unwired" in done.stderr


def _apply(doc: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    import jsonpatch

    out: dict[str, Any] = jsonpatch.apply_patch(doc, [op])
    return out


def test_admit_pod_reads_stdin(admit_ns: str, tmp_path: Path) -> None:
    """`kustomize build | icache admit-pod -f -`: the same reading as a file."""
    backends = tmp_path / "none"
    backends.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "icache_cli.main",
            "admit-pod",
            "-f",
            "-",
            "--backends-from",
            str(backends),
        ],
        input=yaml.safe_dump_all(_workloads(admit_ns)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("outcome=") == len(_workloads(admit_ns))
