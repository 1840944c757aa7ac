"""`icache doctor` against the real API server: the engine-version listing and the
client/server skew finding (docs/doctor.md, "Engine versions").

A Managed LMCacheServer CacheBackend (server image ``lmcache/standalone:v0.4.7``) and
engine pods wired to it whose ``lmcache-kernel-check`` status carries a verdict: a
matching client, a skewed one, none reported, and one from before verdicts carried
versions. The doctor reads them through the API server (pods in full for this listing)
and must list every pod's versions and the server's, and name the skewed pod only.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from icache_install.doctor.diagnose import Scope, diagnose
from icache_install.doctor.findings import Finding
from icache_install.doctor.reader import ClusterReader
from kubeio.client import Kube
from shared import constants as c
from tests.builders import findings_with_code
from tests.kube_helpers import create_namespace

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
CHECK = "lmcache-kernel-check"
IMAGE = "vllm/vllm-openai:v0.11.0"


def create_backend(api: client.ApiClient, ns: str, image: str | None = None) -> dict[str, Any]:
    remote: dict[str, Any] = {"provider": "LMCacheServer", "ownership": "Managed"}
    if image:
        remote["lmCacheServer"] = {"image": image}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CacheBackend",
        "metadata": {"name": "cb"},
        "spec": {
            "runtime": "VLLM",
            "remoteStorage": remote,
            "engineSelector": {"matchLabels": {"app": "vllm"}},
        },
    }
    custom: Any = client.CustomObjectsApi(api)
    out: dict[str, Any] = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    return out


def create_engine(
    api: client.ApiClient, ns: str, cb: dict[str, Any], name: str, verdict: dict[str, Any]
) -> None:
    """An engine pod wired to ``cb`` whose kernel check terminated with ``verdict``."""
    core: Any = client.CoreV1Api(api)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "vllm"},
            "annotations": {
                c.ANNOTATION_INJECTED_BY: f"{ns}/cb",
                c.ANNOTATION_INJECTED_BY_UID: cb["metadata"]["uid"],
                c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE: "report-only",
            },
        },
        "spec": {
            "initContainers": [{"name": CHECK, "image": IMAGE}],
            "containers": [{"name": "vllm", "image": IMAGE}],
        },
    }
    core.create_namespaced_pod(ns, body)
    status = {
        "initContainerStatuses": [
            {
                "name": CHECK,
                "image": IMAGE,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "message": json.dumps(verdict)}},
            }
        ]
    }
    core.patch_namespaced_pod_status(name, ns, {"status": status})


def ok(versions: dict[str, str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": "report-only", "result": "ok", "error": ""}
    if versions is not None:
        out["versions"] = versions
    return out


def run_doctor(api: client.ApiClient, ns: str) -> list[Finding]:
    return diagnose(ClusterReader(Kube(api)), Scope(ns)).findings


def test_doctor_lists_client_and_server_versions_and_names_the_skew(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> None:
    ns = create_namespace(kube_api_client, "doc-ver")
    cb = create_backend(kube_api_client, ns)
    create_engine(kube_api_client, ns, cb, "e-match", ok({"lmcache": "0.4.7", "vllm": "0.11.0"}))
    create_engine(kube_api_client, ns, cb, "e-skew", ok({"lmcache": "0.5.6", "vllm": "0.33.0"}))
    create_engine(kube_api_client, ns, cb, "e-none", ok({"vllm": "0.11.0", "torch": "2.8.0"}))
    create_engine(kube_api_client, ns, cb, "e-old", ok(None))

    found = run_doctor(kube_api_client, ns)
    [listing] = findings_with_code(found, "backend.EngineVersions")
    assert listing.object.name == "cb"
    assert listing.message == (
        "engine pods: e-match: lmcache 0.4.7, vllm 0.11.0; e-none: vllm 0.11.0, torch 2.8.0; "
        "e-old: not reported; e-skew: lmcache 0.5.6, vllm 0.33.0; "
        "LMCache server lmcache/standalone:v0.4.7: lmcache 0.4.7"
    )
    [skew] = findings_with_code(found, "backend.ClientServerSkew")
    assert skew.severity == "warning"
    assert skew.details["skewed"] == {"e-skew": "0.5.6"}

    # The server moved to the clients' release: e-match is now the odd one out.
    custom: Any = client.CustomObjectsApi(kube_api_client)
    patch = {"spec": {"remoteStorage": {"lmCacheServer": {"image": "lmcache/standalone:v0.5.6"}}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "cb", patch)
    [skew] = findings_with_code(run_doctor(kube_api_client, ns), "backend.ClientServerSkew")
    assert skew.details["skewed"] == {"e-match": "0.4.7"}

    # Pinned by digest: listed as unknown, never compared.
    digest = "lmcache/standalone@sha256:" + "0" * 64
    patch = {"spec": {"remoteStorage": {"lmCacheServer": {"image": digest}}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "cb", patch)
    found = run_doctor(kube_api_client, ns)
    assert findings_with_code(found, "backend.ClientServerSkew") == []
    [listing] = findings_with_code(found, "backend.EngineVersions")
    assert f"LMCache server {digest}: version unknown" in listing.message
