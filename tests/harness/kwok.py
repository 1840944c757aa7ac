"""Fake nodes and pod lifecycles for kwok, the kubelet stand-in of the harness.

kwok (sigs.k8s.io/kwok) watches the nodes it manages and the pods bound to them,
and writes their status the way a kubelet would, following *stages*: a selector
over the object and the status to write next. The harness runs it with

* kwok's own default stages, copied from the pinned release by
  ``tests/controlplane/build.sh`` (``node-initialize``, ``node-heartbeat-with-lease``,
  ``pod-ready``, ``pod-complete``, ``pod-delete``): nodes turn Ready, a bound pod
  turns Running and Ready at once, a deleted pod goes away;
* three more stages tests trigger with an annotation on a pod, for what a
  kubelet reports on its own and a test cannot otherwise provoke:

  ``harness.inferencecache.io/restarts: '{"<container>": <n>}'``
      the named containers restart in place until their ``restartCount`` is
      ``n`` (same pod UID, ``lastState.terminated`` set): a crashed container
      respawned by the kubelet. Native sidecars (init containers with
      ``restartPolicy: Always``, reported in ``initContainerStatuses``) restart the
      same way; other init containers have run to completion and are left alone.
      Level-based, so each bump restarts once; :func:`restart_patch` computes the
      annotation from the live pod.
  ``harness.inferencecache.io/fail: "true"``
      the pod fails (phase ``Failed``, its containers terminated with exit code 1);
      a ReplicaSet replaces it with a new pod.
  ``harness.inferencecache.io/ready: "false"``
      the pod stays Running but turns not Ready (a failing readiness probe) until
      the annotation is removed or set to anything else.

Nothing here imports pytest or a Kubernetes client: these are the manifests and
patches; :mod:`tests.harness.controllers` runs kwok.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: kwok manages the nodes carrying this annotation (and only those).
MANAGED_NODE_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_NODE_VALUE = "fake"
GPU_RESOURCE = "nvidia.com/gpu"

STAGE_PREFIX = "harness.inferencecache.io"
RESTARTS_ANNOTATION = f"{STAGE_PREFIX}/restarts"
FAIL_ANNOTATION = f"{STAGE_PREFIX}/fail"
READY_ANNOTATION = f"{STAGE_PREFIX}/ready"

#: Pod IPs kwok hands out (kept apart from the Service range 10.0.0.0/24).
POD_CIDR = "10.244.0.0/16"
NODE_LEASE_SECONDS = 40

#: The files build.sh copies from kwok's release (kustomize/stage/...).
DEFAULT_STAGE_FILES = (
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-complete.yaml",
    "pod-delete.yaml",
)


@dataclass(frozen=True)
class FakeNode:
    """A node kwok plays the kubelet for. GPU nodes carry ``nvidia.com/gpu``
    capacity and the ``nvidia.com/gpu`` NoSchedule taint GPU pools usually have
    (the API server's ExtendedResourceToleration plugin lets pods that request a
    GPU tolerate it, as on GKE and EKS)."""

    name: str
    gpus: int = 0
    cpu: str = "32"
    memory: str = "128Gi"
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        capacity: dict[str, str] = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            **self.labels,
        }
        spec: dict[str, Any] = {}
        if self.gpus:
            capacity[GPU_RESOURCE] = str(self.gpus)
            labels["nvidia.com/gpu.present"] = "true"
            spec["taints"] = [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {MANAGED_NODE_ANNOTATION: MANAGED_NODE_VALUE},
            },
            "spec": spec,
            # A kubelet registers its node with its capacity; so does this.
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }


DEFAULT_NODES: tuple[FakeNode, ...] = (
    FakeNode("kwok-gpu-0", gpus=8, cpu="96", memory="1Ti", labels={"pool": "gpu"}),
    FakeNode("kwok-gpu-1", gpus=8, cpu="96", memory="1Ti", labels={"pool": "gpu"}),
    FakeNode("kwok-cpu-0", labels={"pool": "cpu"}),
    FakeNode("kwok-cpu-1", labels={"pool": "cpu"}),
)


# --------------------------------------------------------------------------- stages

_POD = {"apiGroup": "v1", "kind": "Pod"}
_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_RUNNING = {"key": ".status.phase", "operator": "In", "values": ["Running"]}

# jq over the pod: does the restartCount of a container, or of a native sidecar (an
# init container with restartPolicy Always), lag the annotation's target?
_RESTART_PENDING = (
    f'(.metadata.annotations["{RESTARTS_ANNOTATION}"] // "{{}}" | fromjson) as $want'
    ' | [.spec.initContainers[]? | select(.restartPolicy == "Always") | .name] as $sidecars'
    " | [(.status.containerStatuses[]?),"
    " (.status.initContainerStatuses[]? | select(.name as $n | $sidecars | any(. == $n)))"
    " | select($want[.name] != null and $want[.name] != .restartCount)] | length > 0"
)

# Go templates (kwok renders them with sprig) producing the status to patch in.
# A status list is replaced whole by the patch, so every entry is written. One
# entry, restarted in place when the annotation asks for more restarts than it has:
_RESTARTED_ENTRY = """\
{{{{ if and (hasKey $want .name) (ne (int64 (index $want .name)) (int64 .restartCount)) {cond}}}}}
- {{{{ toJson (merge (dict "restartCount" (int64 (index $want .name)) "ready" true "started" true
     "lastState" (dict "terminated" (dict "exitCode" 137 "reason" "Error"
                    "startedAt" (dig "state" "running" "startedAt" $now .) "finishedAt" $now))
     "state" (dict "running" (dict "startedAt" $now))) (omit . "state" "lastState")) }}}}
{{{{ else }}}}
- {{{{ toJson . }}}}
{{{{ end }}}}"""
# initContainerStatuses only for a pod that has them (an empty list would clear the
# field); of those, only native sidecars restart.
_RESTART_STATUS = f"""\
{{{{ $now := Now }}}}
{{{{ $want := fromJson (index .metadata.annotations "{RESTARTS_ANNOTATION}") }}}}
{{{{ $sidecars := list }}}}
{{{{ range .spec.initContainers }}}}
{{{{ if eq .restartPolicy "Always" }}}}{{{{ $sidecars = append $sidecars .name }}}}{{{{ end }}}}
{{{{ end }}}}
containerStatuses:
{{{{ range .status.containerStatuses }}}}
{_RESTARTED_ENTRY.format(cond="")}
{{{{ end }}}}
{{{{ with .status.initContainerStatuses }}}}
initContainerStatuses:
{{{{ range . }}}}
{_RESTARTED_ENTRY.format(cond="(has .name $sidecars)")}
{{{{ end }}}}
{{{{ end }}}}
"""

_FAIL_STATUS = """\
{{ $now := Now }}
conditions:
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "False", reason: PodFailed, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: PodFailed, lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .status.containerStatuses }}
- {{ toJson (merge (dict "ready" false "started" false
     "state" (dict "terminated" (dict "exitCode" 1 "reason" "Error"
                "startedAt" (dig "state" "running" "startedAt" $now .) "finishedAt" $now)))
     (omit . "state")) }}
{{ end }}
phase: Failed
"""


def _readiness_status(ready: bool) -> str:
    value = "True" if ready else "False"
    reason = "" if ready else ', reason: ContainersNotReady, message: "readiness probe failed"'
    flag = "true" if ready else "false"
    return f"""\
{{{{ $now := Now }}}}
conditions:
- {{type: Initialized, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
- {{type: Ready, status: "{value}"{reason}, lastTransitionTime: {{{{ $now | Quote }}}}}}
- {{type: ContainersReady, status: "{value}"{reason}, lastTransitionTime: {{{{ $now | Quote }}}}}}
containerStatuses:
{{{{ range .status.containerStatuses }}}}
- {{{{ toJson (merge (dict "ready" {flag}) .) }}}}
{{{{ end }}}}
"""


def _ready_condition_is(*values: str) -> dict[str, Any]:
    return {
        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
        "operator": "In",
        "values": list(values),
    }


def _stage(name: str, selector: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": _POD,
            "selector": {"matchExpressions": selector},
            # Ahead of kwok's own pod stages when both match.
            "weight": 100,
            "next": {"statusTemplate": status},
        },
    }


def harness_stages() -> list[dict[str, Any]]:
    """The stages tests trigger by annotation (see the module docstring)."""
    annotation = ".metadata.annotations"
    return [
        _stage(
            "harness-container-restart",
            [_NOT_DELETING, _RUNNING, {"key": _RESTART_PENDING, "operator": "In",
                                       "values": ["true"]}],
            _RESTART_STATUS,
        ),
        _stage(
            "harness-pod-fail",
            [_NOT_DELETING, _RUNNING, {"key": f'{annotation}["{FAIL_ANNOTATION}"]',
                                       "operator": "In", "values": ["true"]}],
            _FAIL_STATUS,
        ),
        _stage(
            "harness-pod-unready",
            [_NOT_DELETING, _RUNNING, _ready_condition_is("True"),
             {"key": f'{annotation}["{READY_ANNOTATION}"]', "operator": "In",
              "values": ["false"]}],
            _readiness_status(ready=False),
        ),
        _stage(
            "harness-pod-ready-again",
            [_NOT_DELETING, _RUNNING, _ready_condition_is("False"),
             {"key": f'{annotation}["{READY_ANNOTATION}"]', "operator": "NotIn",
              "values": ["false"]},
             {"key": f'{annotation}["{FAIL_ANNOTATION}"]', "operator": "NotIn",
              "values": ["true"]}],
            _readiness_status(ready=True),
        ),
    ]  # fmt: skip


def kwok_configuration() -> dict[str, Any]:
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "cidr": POD_CIDR,
            "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
            "manageNodesWithAnnotationSelector": f"{MANAGED_NODE_ANNOTATION}={MANAGED_NODE_VALUE}",
            "enableDebuggingHandlers": False,
            # kwok's documented defaults, spelled out: a config file given with
            # --config leaves them zero otherwise.
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
        },
    }


def write_config(path: Path, default_stages_dir: Path) -> Path:
    """One multi-document file for ``kwok --config``: the options, kwok's default
    stages from ``default_stages_dir`` and :func:`harness_stages`."""
    docs: list[Any] = [kwok_configuration()]
    for name in DEFAULT_STAGE_FILES:
        source = default_stages_dir / name
        docs.extend(d for d in yaml.safe_load_all(source.read_text()) if d)
    docs.extend(harness_stages())
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


# --------------------------------------------------------------------------- triggers


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def restart_count(pod: Mapping[str, Any], container: str) -> int:
    """The live restartCount of ``container`` (or init container, a native sidecar
    among them) in ``pod``; 0 before it has a status."""
    st = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for status in st.get(key) or []:
            if status.get("name") == container:
                return int(status.get("restartCount") or 0)
    return 0


def restart_patch(pod: Mapping[str, Any], containers: Iterable[str]) -> dict[str, Any]:
    """A merge patch asking kwok to restart each of ``containers`` once more."""
    try:
        want: dict[str, int] = json.loads(_annotations(pod).get(RESTARTS_ANNOTATION) or "{}")
    except ValueError:
        want = {}
    for name in containers:
        want[name] = max(want.get(name, 0), restart_count(pod, name)) + 1
    return {"metadata": {"annotations": {RESTARTS_ANNOTATION: json.dumps(want, sort_keys=True)}}}


def fail_patch() -> dict[str, Any]:
    """A merge patch making kwok fail the pod (phase Failed)."""
    return {"metadata": {"annotations": {FAIL_ANNOTATION: "true"}}}


def readiness_patch(ready: bool) -> dict[str, Any]:
    """A merge patch turning the pod not Ready (``ready=False``) or Ready again."""
    return {"metadata": {"annotations": {READY_ANNOTATION: None if ready else "false"}}}


def node_manifests(nodes: Sequence[FakeNode]) -> list[dict[str, Any]]:
    return [node.manifest() for node in nodes]
