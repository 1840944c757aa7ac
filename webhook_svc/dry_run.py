"""`icache admit-pod`: wire a Pod or a workload's pod template offline, as the Pod webhook would.

    icache admit-pod -f deploy.yaml --backends-from backends/ [--namespace team-a]
        [--kvevent-subscriber-image IMG] [--server-address HOST:PORT]
        [--output pod|patch|workload]

The manifest may be a Pod, or a Deployment, StatefulSet, ReplicaSet, DaemonSet or Job
(its ``spec.template``; a CronJob's ``spec.jobTemplate.spec.template``). The namespace is
the manifest's, else ``--namespace``, else ``default``. Output: the wired Pod (YAML), the
RFC 6902 patch the webhook would return (JSON), or the workload with the wired template
(YAML). The outcome, reason and message go to stderr. Exit 0 for any wiring outcome
(fail-open included), 2 when the input cannot be read.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from shared.pod_wiring import WiringResult, wire_pod
from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_review import json_patch
from webhook_svc.backend_files import BackendFileError, load_backends

TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
DEFAULT_NAMESPACE = "default"


class InputError(Exception):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--filename", required=True, help="Pod or workload manifest (YAML/JSON), - for stdin"
    )
    parser.add_argument(
        "--backends-from", required=True, type=Path, help="directory of CacheBackend YAML files"
    )
    parser.add_argument(
        "-n", "--namespace", default=None, help="namespace when the manifest has none"
    )
    parser.add_argument("--kvevent-subscriber-image", default=None, help="subscriber sidecar image")
    parser.add_argument(
        "--server-address",
        default=InjectContext().server_address,
        help="cache-index server gRPC address the subscriber reports to",
    )
    parser.add_argument(
        "-o", "--output", choices=("pod", "patch", "workload"), default="pod", help="what to print"
    )


def read_manifest(filename: str) -> dict[str, Any]:
    """The first Pod or supported workload document of the file."""
    try:
        text = sys.stdin.read() if filename == "-" else Path(filename).read_text(encoding="utf-8")
        docs = list(yaml.safe_load_all(text))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {filename}: {exc}") from exc
    for doc in docs:
        if isinstance(doc, dict) and (
            doc.get("kind") == "Pod" or doc.get("kind") in TEMPLATE_PATHS
        ):
            return doc
    raise InputError(f"{filename} holds no Pod or {'/'.join(TEMPLATE_PATHS)} document")


def _template(manifest: dict[str, Any]) -> dict[str, Any]:
    node: Any = manifest
    for key in TEMPLATE_PATHS[str(manifest["kind"])]:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise InputError(f"{manifest['kind']} has no pod template")
    return node


def pod_of(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The Pod the API server would admit for this manifest (template metadata + spec)."""
    if manifest.get("kind") == "Pod":
        pod = copy.deepcopy(manifest)
    else:
        template = _template(manifest)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": copy.deepcopy(template.get("metadata") or {}),
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        name = (manifest.get("metadata") or {}).get("name")
        if name and not pod["metadata"].get("name"):
            pod["metadata"]["generateName"] = f"{name}-"
    pod.setdefault("metadata", {})["namespace"] = namespace
    return pod


def workload_with(manifest: dict[str, Any], wired: dict[str, Any]) -> dict[str, Any]:
    """The manifest with the wired pod's labels, annotations and spec in its template."""
    if manifest.get("kind") == "Pod":
        return wired
    out = copy.deepcopy(manifest)
    template = _template(out)
    metadata = template.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        value = (wired.get("metadata") or {}).get(key)
        if value:
            metadata[key] = value
        else:
            metadata.pop(key, None)
    template["spec"] = wired["spec"]
    return out


def admit(
    manifest: dict[str, Any], backends: list[dict[str, Any]], ctx: InjectContext, namespace: str
) -> tuple[dict[str, Any], WiringResult]:
    pod = pod_of(manifest, namespace)
    return pod, wire_pod(pod, backends, ctx, namespace=namespace)


def run(args: argparse.Namespace) -> int:
    try:
        manifest = read_manifest(args.filename)
        namespace = (
            (manifest.get("metadata") or {}).get("namespace") or args.namespace or DEFAULT_NAMESPACE
        )
        # Like `kubectl apply -n <ns> -f DIR`: backends without a namespace join the pod's.
        backends = load_backends(args.backends_from, default_namespace=namespace)
    except (InputError, BackendFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ctx = InjectContext(
        kvevent_subscriber_image=args.kvevent_subscriber_image, server_address=args.server_address
    )
    pod, result = admit(manifest, backends, ctx, namespace)
    if args.output == "patch":
        print(json.dumps(json_patch(pod, result.pod), indent=2))
    elif args.output == "workload":
        print(yaml.safe_dump(workload_with(manifest, result.pod), sort_keys=False), end="")
    else:
        print(yaml.safe_dump(result.pod, sort_keys=False), end="")
    backend = f" backend={result.backend}" if result.backend else ""
    print(
        f"outcome={result.outcome} reason={result.reason}{backend}: {result.message}",
        file=sys.stderr,
    )
    return 0
