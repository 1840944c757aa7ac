"""The basics of Kubernetes Pod validation, as a last check on what wiring produced.

A mutating webhook's patch that makes a Pod invalid gets the Pod *rejected* by the API
server: the opposite of fail-open. The Pod webhook therefore compares the problems of
the wired pod with those of the pod as submitted, and admits the pod unwired if wiring
introduced any. Problems the operator's pod already had are not ours to judge.

Checked: container names (DNS-1123 labels, unique across init, regular and ephemeral
containers), volume names (DNS-1123 labels, unique), per-container unique mountPaths,
mounts referencing declared volumes, env var names (``[-._a-zA-Z][-._a-zA-Z0-9]*``),
and ``restartPolicy`` only on init containers and only ``Always``.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            out.append((field, container if isinstance(container, dict) else {}))
    return out


def pod_problems(pod: dict[str, Any]) -> set[str]:
    """A set of human-readable violations (empty: passes these basics)."""
    raw_spec = pod.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    problems: set[str] = set()

    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
    volume_names = [str(v.get("name") or "") for v in volumes]
    for name in volume_names:
        if not _DNS1123_LABEL.match(name) or len(name) > 63:
            problems.add(f"volume name {name!r} is not a DNS-1123 label")
    for name in {n for n in volume_names if volume_names.count(n) > 1}:
        problems.add(f"volume name {name!r} is duplicated")

    seen: dict[str, int] = {}
    for field, container in _containers(spec):
        name = str(container.get("name") or "")
        seen[name] = seen.get(name, 0) + 1
        if not _DNS1123_LABEL.match(name) or len(name) > 63:
            problems.add(f"container name {name!r} is not a DNS-1123 label")
        paths: list[str] = []
        for mount in container.get("volumeMounts") or []:
            path = posixpath.normpath(str(mount.get("mountPath") or "")) if mount else ""
            paths.append(path)
            if mount.get("name") not in volume_names:
                problems.add(f"container {name!r} mounts undeclared volume {mount.get('name')!r}")
        for path in {p for p in paths if paths.count(p) > 1}:
            problems.add(f"container {name!r} mounts {path!r} more than once")
        for var in container.get("env") or []:
            env_name = str(var.get("name") or "")
            if not _ENV_NAME.match(env_name):
                problems.add(f"container {name!r} has invalid env name {env_name!r}")
        policy = container.get("restartPolicy")
        if policy is not None and (field != "initContainers" or policy != "Always"):
            problems.add(f"container {name!r} has restartPolicy {policy!r} in {field}")
    for name, count in seen.items():
        if count > 1:
            problems.add(f"container name {name!r} is duplicated")
    return problems


def introduced_problems(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Violations ``after`` has that ``before`` did not."""
    return pod_problems(after) - pod_problems(before)
