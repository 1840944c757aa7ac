"""The engine pods the contract tests wire: every sample backend, every CRD enum value,
every Pod example of examples/admission/.

Each pod is admitted the way ``icache admit-pod`` admits it (webhook_svc/offline/admit_pod_cli.py
``admit``), in-process. A Managed backend gets the ``status.endpoint`` its reconciler
would publish (the webhook fails open without one).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from shared import constants as c
from shared.api.backend import read_backend_for_wiring
from shared.engine_versions import ReleaseSet
from shared.pod_wiring import OUTCOME_INJECTED, resolve_binding
from shared.runtime_adapters.base import InjectContext
from shared.validation import validate
from tests.samples import CRD_PATH, ROOT, sample_documents
from webhook_svc.offline.admit_pod_cli import admit

EXAMPLES_DIR = ROOT / "examples" / "admission"
NAMESPACE = "default"
MODEL = "Qwen/Qwen3-8B"
SUBSCRIBER_IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:0.1.0"
CTX = InjectContext(kvevent_subscriber_image=SUBSCRIBER_IMAGE)
OWN_IMAGES = (SUBSCRIBER_IMAGE,)
# The port each provider's managed Service publishes (docs/api.md).
MANAGED_PORT = {
    c.PROVIDER_REDIS: 6379,
    c.PROVIDER_LMCACHE_SERVER: 65432,
    c.PROVIDER_MOONCAKE: 50051,
}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Pod")


@dataclass(frozen=True)
class Case:
    """One admitted engine pod: what went in, what came out, where the tier is."""

    label: str
    runtime: str
    backend: dict[str, Any]
    original: dict[str, Any]
    wired: dict[str, Any]
    endpoint: str | None


def with_status(backend: dict[str, Any]) -> dict[str, Any]:
    """The backend as the webhook reads it once Ready: a Managed remote tier has the
    endpoint its Service publishes."""
    out = copy.deepcopy(backend)
    out.setdefault("metadata", {}).setdefault("namespace", NAMESPACE)
    remote = out.get("spec", {}).get("remoteStorage") or {}
    if remote.get("ownership") == c.OWNERSHIP_MANAGED and remote.get("provider") in MANAGED_PORT:
        name = out["metadata"]["name"]
        host = f"{name}-{str(remote['provider']).lower()}.{NAMESPACE}.svc.cluster.local"
        out["status"] = {
            "endpoint": f"{host}:{MANAGED_PORT[remote['provider']]}",
            "conditions": [
                {
                    "type": c.COND_READY,
                    "status": "True",
                    "reason": c.REASON_BACKEND_READY,
                    "message": "ok",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    return out


def endpoint_of(backend: dict[str, Any]) -> str | None:
    binding = resolve_binding(read_backend_for_wiring(backend).model)
    return binding.endpoint if binding is not None else None


def engine_deployment(backend: dict[str, Any], releases: ReleaseSet) -> dict[str, Any]:
    """An engine Deployment the backend selects, on the set's engine image."""
    spec = backend["spec"]
    labels = dict((spec.get("engineSelector") or {}).get("matchLabels") or {})
    if spec.get("runtime") == c.RUNTIME_SGLANG:
        container = {
            "name": "sglang",
            "image": f"lmsysorg/sglang:v{releases.sglang}",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--model-path", MODEL, "--port", "30000"],
        }
    else:
        container = {
            "name": "vllm",
            "image": f"vllm/vllm-openai:v{releases.vllm}",
            "command": ["vllm", "serve"],
            "args": [MODEL],
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{backend['metadata']['name']}-engine", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


@cache
def crd_enums() -> dict[tuple[str, ...], list[str]]:
    """spec path -> the values the generated CRD's enum allows."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out: dict[tuple[str, ...], list[str]] = {}

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        if "enum" in node:
            out[path] = [str(v) for v in node["enum"]]
        for key, child in (node.get("properties") or {}).items():
            walk(child, (*path, key))

    walk(root, ())
    return out


def set_path(obj: dict[str, Any], path: tuple[str, ...], value: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node = out.setdefault("spec", {})
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            return obj
    node[path[-1]] = value
    return out


@cache
def _documents() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(sample_documents())


def sample_backends() -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, copy.deepcopy(doc))
        for name, doc in _documents()
        if doc.get("kind") == c.KIND and (doc["spec"].get("engineSelector") or {})
    ]


def sample_workloads() -> list[dict[str, Any]]:
    return [doc for _, doc in _documents() if doc.get("kind") in WORKLOAD_KINDS]


def _selects(backend: dict[str, Any], workload: dict[str, Any]) -> bool:
    wanted = (backend["spec"].get("engineSelector") or {}).get("matchLabels") or {}
    template = workload if workload.get("kind") == "Pod" else workload["spec"]["template"]
    labels = (template.get("metadata") or {}).get("labels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def admitted(label: str, workload: dict[str, Any], backends: list[dict[str, Any]]) -> Case | None:
    """The workload's pod wired as ``icache admit-pod`` wires it; None when the
    webhook would not inject (fail-open, skipped)."""
    pod, result = admit(workload, backends, CTX, NAMESPACE)
    if result.outcome != OUTCOME_INJECTED:
        return None
    chosen = next(
        b
        for b in backends
        if f"{b['metadata'].get('namespace', NAMESPACE)}/{b['metadata']['name']}" == result.backend
    )
    return Case(
        label=label,
        runtime=str(chosen["spec"]["runtime"]),
        backend=chosen,
        original=pod,
        wired=result.pod,
        endpoint=endpoint_of(chosen),
    )


@cache
def cases_of(sample: str, releases: ReleaseSet) -> tuple[Case, ...]:
    """``sample_cases`` of the sample file's backend, computed once per session."""
    doc = next(d for n, d in sample_backends() if n == sample)
    return tuple(sample_cases(sample, doc, releases))


def sample_cases(sample: str, doc: dict[str, Any], releases: ReleaseSet) -> Iterator[Case]:
    """The sample backend itself, then one variant per CRD enum value the API admits,
    each wiring the sample's own engine workload (or a generated one)."""
    base = with_status(doc)
    variants: list[tuple[str, dict[str, Any]]] = [(sample, base)]
    for path, values in crd_enums().items():
        for value in values:
            variant = set_path(base, path, value)
            if path == ("runtime",) and value != base["spec"].get("runtime"):
                # The operator's engineOverrides are written for the sample's runtime.
                variant["spec"].get("integration", {}).pop("engineOverrides", None)
            if variant != base and not validate(variant):
                variants.append((f"{sample} {'.'.join(path)}={value}", with_status(variant)))
    workloads = sample_workloads()
    for label, backend in variants:
        own = [w for w in workloads if _selects(backend, w)]
        same_runtime = [
            w
            for w in own
            if ("sglang" in json.dumps(w)) == (backend["spec"].get("runtime") == c.RUNTIME_SGLANG)
        ]
        workload = same_runtime[0] if same_runtime else engine_deployment(backend, releases)
        case = admitted(label, workload, [backend])
        if case is not None:
            yield case


def example_pods() -> list[tuple[str, dict[str, Any]]]:
    """(file name, Pod) of every examples/admission/pod-*.json AdmissionReview."""
    out = []
    for path in sorted(EXAMPLES_DIR.glob("pod-*.json")):
        review = json.loads(path.read_text())
        out.append((path.name, review["request"]["object"]))
    return out


def example_case(name: str, pod: dict[str, Any]) -> Case | None:
    backends = [with_status(doc) for _, doc in sample_backends()]
    return admitted(name, pod, backends)


# ------------------------------------------------------------------ VLLMOffloading

VLLM_OFFLOADING_BACKEND: dict[str, Any] = {
    "apiVersion": "inferencecache.io/v1alpha1",
    "kind": c.KIND,
    "metadata": {"name": "native-offload", "namespace": NAMESPACE},
    "spec": {
        "runtime": c.RUNTIME_VLLM,
        "type": c.TYPE_VLLM_OFFLOADING,
        "engineSelector": {"matchLabels": {"app": "vllm-offload"}},
        "vllmOffloading": {"cpu": {"capacity": "64Gi"}, "evictionPolicy": "ARC"},
    },
}
# The shapes the issue names: plain, TP, DP, TP x DP, and a P/D pod with NIXL.
VLLM_OFFLOADING_SHAPES: dict[str, list[str]] = {
    "plain": [],
    "-tp 4": ["-tp", "4"],
    "-dp 2": ["-dp", "2"],
    "-tp 2 -dp 2": ["-tp", "2", "-dp", "2"],
    "nixl": ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'],
}


def vllm_offloading_workload(version: str, args: list[str]) -> dict[str, Any]:
    labels = {"app": "vllm-offload"}
    container = {
        "name": "vllm",
        "image": f"vllm/vllm-openai:v{version}",
        "command": ["vllm", "serve"],
        "args": [MODEL, *args],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "offload-engine", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def vllm_offloading_case(version: str, shape: str, policy: str = "ARC") -> Case | None:
    """The VLLMOffloading backend (eviction ``policy``) wiring one engine shape on vLLM
    ``version``; None when the webhook refuses it."""
    backend = copy.deepcopy(VLLM_OFFLOADING_BACKEND)
    backend["spec"]["vllmOffloading"]["evictionPolicy"] = policy
    workload = vllm_offloading_workload(version, VLLM_OFFLOADING_SHAPES[shape])
    return admitted(f"VLLMOffloading {shape} {policy} @ {version}", workload, [backend])
