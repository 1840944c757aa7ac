"""`icache admit-pod`: wire Pods and workloads' pod templates offline, as the Pod webhook would.

    icache admit-pod -f FILE|DIR|- [-f ...] --backends-from DIR [--namespace team-a]
        [--kvevent-subscriber-image IMG] [--server-address HOST:PORT]
        [--output pod|patch|workload|json] [--fail-on-unwired]

Every Pod, Deployment, StatefulSet, ReplicaSet, DaemonSet, Job and CronJob of the
input (multi-document files, ``kind: List``, directories read recursively, ``-`` for
stdin) is admitted: a workload's ``spec.template`` (a CronJob's
``spec.jobTemplate.spec.template``) becomes the Pod the API server would admit. The
namespace is the manifest's, else ``--namespace``, else ``default``; backends whose
file names no namespace join the workload's, as ``kubectl apply -n`` would put them.
Other kinds are skipped with a note.

Output (stdout): the wired Pods, or the workloads with the wired template (YAML,
one document each), or the RFC 6902 patch the webhook would return (the patch alone
for one workload, else a JSON list with each workload's), or a JSON report. One line
per workload goes to stderr: its outcome, reason, backend and message, then one
``Warning:`` line per admission warning the webhook would return (a container whose
memory limit cannot hold the host memory the wiring pins).

Exit code: 0 for any wiring outcome (fail-open included) unless
``--fail-on-unwired``: then 1 when any workload would be admitted unwired (every
fail-open outcome; an explicit ``skip-inject`` opt-out is not a failure). 2 when the
input cannot be read or holds no workload.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import dataclass
from typing import Any

import yaml

from cli_support import arg_types as cli_types
from shared.json_diff import json_patch
from shared.objects import meta, metadata
from shared.pod_wiring import (
    DEFAULT_NAMESPACE,
    OUTCOME_FAIL_OPEN,
    OUTCOME_SKIPPED,
    WiringResult,
    wire_pod,
)
from shared.runtime_adapters.base import InjectContext
from webhook_svc.backend_files import BackendFileError, load_backends
from webhook_svc.offline.manifest_input import Document, InputError, read_inputs

TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        type=cli_types.input_path,
        metavar="FILE|DIR|-",
        help="Pod or workload manifests (YAML/JSON): a file, a directory (recursive) or - for "
        "stdin; repeatable (default: none, required)",
    )
    parser.add_argument(
        "--backends-from",
        required=True,
        type=cli_types.existing_dir,
        metavar="DIR",
        help="directory of CacheBackend YAML files, status.endpoint included "
        "(default: none, required)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=cli_types.dns_label,
        default=None,
        help=f"namespace of manifests that name none (default: {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--kvevent-subscriber-image",
        type=cli_types.optional_text,
        default=None,
        metavar="IMAGE",
        help="subscriber sidecar image, as the webhook's flag (default: unset, no sidecar)",
    )
    parser.add_argument(
        "--server-address",
        default=InjectContext().server_address,
        metavar="HOST:PORT",
        help="cache-index server gRPC address the subscriber reports to",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("pod", "patch", "workload", "json"),
        default="pod",
        help="what to print on stdout",
    )
    parser.add_argument(
        "--fail-on-unwired",
        action="store_true",
        help="exit 1 when any workload would be admitted unwired (default: off, exit 0)",
    )


@dataclass(frozen=True)
class WorkloadAdmission:
    """One workload of the input and what the Pod webhook makes of its pod."""

    doc: Document
    namespace: str
    pod: dict[str, Any]
    result: WiringResult

    @property
    def label(self) -> str:
        return f"{self.doc.kind} {self.namespace}/{self.doc.name or '(no name)'}"

    @property
    def unwired(self) -> bool:
        return self.result.outcome == OUTCOME_FAIL_OPEN

    def line(self) -> str:
        backend = f" backend={self.result.backend}" if self.result.backend else ""
        return (
            f"{self.label} ({self.doc.where}): outcome={self.result.outcome} "
            f"reason={self.result.reason}{backend}: {self.result.message}"
        )

    def report(self) -> dict[str, Any]:
        """The stable JSON form (docs/cli.md)."""
        return {
            "source": self.doc.source,
            "document": self.doc.index,
            "kind": self.doc.kind,
            "namespace": self.namespace,
            "name": self.doc.name,
            "outcome": self.result.outcome,
            "reason": self.result.reason,
            "backend": self.result.backend,
            "message": self.result.message,
            "warnings": list(self.result.warnings),
            "wired": self.result.outcome not in (OUTCOME_FAIL_OPEN, OUTCOME_SKIPPED),
            "patch": json_patch(self.pod, self.result.pod),
        }


def is_workload(doc: Document) -> bool:
    return isinstance(doc.body, dict) and (doc.kind == "Pod" or doc.kind in TEMPLATE_PATHS)


def _kind_of(value: Any) -> str:
    """``value``'s JSON type, with its article, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _mapping(node: Any, path: str) -> dict[str, Any] | None:
    """``node`` when it is a mapping, None when absent or null; else InputError naming
    ``path`` (the API server would refuse to decode the object)."""
    if node is None:
        return None
    if not isinstance(node, dict):
        raise InputError(f"{path} must be a mapping, not {_kind_of(node)}")
    return node


def check_shape(manifest: dict[str, Any]) -> None:
    """The parts admission reads are mappings: the metadata (its labels and
    annotations) and spec of the Pod, or of the workload's pod template and the path to
    it. InputError naming the field otherwise."""
    _mapping(_lookup(manifest, ("metadata",)), "metadata")
    kind = str(manifest.get("kind"))
    prefix = ""
    if kind != "Pod":
        path = TEMPLATE_PATHS[kind]
        for depth in range(1, len(path) + 1):
            _mapping(_lookup(manifest, path[:depth]), ".".join(path[:depth]))
        prefix = ".".join(path) + "."
    for field in ("metadata", "spec"):
        node = _mapping(_lookup(manifest, (*prefix.split(".")[:-1], field)), prefix + field)
        if node is not None and field == "metadata":
            for key in ("labels", "annotations"):
                _mapping(node.get(key), f"{prefix}metadata.{key}")


def _lookup(manifest: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = manifest
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


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
            "metadata": copy.deepcopy(metadata(template)),
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        name = metadata(manifest).get("name")
        if name and not meta(pod).name:
            metadata(pod)["generateName"] = f"{name}-"
    pod.setdefault("metadata", {})["namespace"] = namespace
    return pod


def workload_with(manifest: dict[str, Any], wired: dict[str, Any]) -> dict[str, Any]:
    """The manifest with the wired pod's labels, annotations and spec in its template."""
    if manifest.get("kind") == "Pod":
        return wired
    out = copy.deepcopy(manifest)
    template = _template(out)
    template_meta = template.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        value = metadata(wired).get(key)
        if value:
            template_meta[key] = value
        else:
            template_meta.pop(key, None)
    template["spec"] = wired["spec"]
    return out


def _with_namespace(backends: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Backends whose file names no namespace, placed in ``namespace``."""
    out = []
    for backend in backends:
        raw_meta = metadata(backend)
        if raw_meta.get("namespace"):
            out.append(backend)
        else:
            out.append({**backend, "metadata": {**raw_meta, "namespace": namespace}})
    return out


def admit(
    manifest: dict[str, Any], backends: list[dict[str, Any]], ctx: InjectContext, namespace: str
) -> tuple[dict[str, Any], WiringResult]:
    check_shape(manifest)
    pod = pod_of(manifest, namespace)
    return pod, wire_pod(pod, _with_namespace(backends, namespace), ctx, namespace=namespace)


def admit_all(
    docs: list[Document], backends: list[dict[str, Any]], ctx: InjectContext, namespace: str | None
) -> list[WorkloadAdmission]:
    out = []
    for doc in docs:
        if not is_workload(doc):
            continue
        ns = str(doc.metadata.get("namespace") or namespace or DEFAULT_NAMESPACE)
        try:
            pod, result = admit(doc.body, backends, ctx, ns)
        except InputError as exc:
            raise InputError(f"{doc.where}: {exc}") from exc
        out.append(WorkloadAdmission(doc, ns, pod, result))
    return out


def _yaml_docs(objects: list[dict[str, Any]]) -> str:
    if len(objects) == 1:
        return str(yaml.safe_dump(objects[0], sort_keys=False))
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects)


def render_admissions(admissions: list[WorkloadAdmission], output: str) -> str:
    if output == "json":
        return json.dumps([a.report() for a in admissions], indent=2) + "\n"
    if output == "patch":
        reports = [a.report() for a in admissions]
        if len(reports) == 1:
            return json.dumps(reports[0]["patch"], indent=2) + "\n"
        keep = ("source", "document", "kind", "namespace", "name", "patch")
        return json.dumps([{k: r[k] for k in keep} for r in reports], indent=2) + "\n"
    if output == "workload":
        return _yaml_docs([workload_with(a.doc.body, a.result.pod) for a in admissions])
    return _yaml_docs([a.result.pod for a in admissions])


def run(args: argparse.Namespace) -> int:
    try:
        docs = read_inputs(args.filename)
        # Backends without a namespace stay unscoped here and join each workload's.
        backends = load_backends(args.backends_from, default_namespace="")
        ctx = InjectContext(
            kvevent_subscriber_image=args.kvevent_subscriber_image,
            server_address=args.server_address,
        )
        admissions = admit_all(docs, backends, ctx, args.namespace)
    except (InputError, BackendFileError) as exc:
        print(f"icache admit-pod: error: {exc}", file=sys.stderr)
        return 2
    if not admissions:
        print(
            f"icache admit-pod: error: no Pod or {'/'.join(TEMPLATE_PATHS)} in "
            f"{', '.join(args.filename)}",
            file=sys.stderr,
        )
        return 2
    sys.stdout.write(render_admissions(admissions, args.output))
    for doc in docs:
        if not is_workload(doc):
            print(
                f"skipped {doc.kind or 'a document'} ({doc.where}): not a workload", file=sys.stderr
            )
    for admission in admissions:
        print(admission.line(), file=sys.stderr)
        for warning in admission.result.warnings:
            print(f"Warning: {admission.label}: {warning}", file=sys.stderr)
    unwired = [a for a in admissions if a.unwired]
    if args.fail_on_unwired and unwired:
        why = "; ".join(f"{a.label}: {a.result.message}" for a in unwired)
        print(
            f"icache admit-pod: {len(unwired)} of {len(admissions)} workload(s) would be "
            f"admitted unwired: {why}",
            file=sys.stderr,
        )
        return 1
    return 0
