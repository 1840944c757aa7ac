"""Pure hardening of the managed provider pods: what Pod Security ``restricted`` asks
of them, and the least a cache server needs to run.

Every managed tier runs where the engines run, and docs/install.md keeps engine
namespaces at ``restricted``. So the pods we render run as a non-root user the image
can run as, with no privilege escalation, every capability dropped, the runtime's
default seccomp profile, no ServiceAccount token (a cache server never calls the API
server) and, where the server writes nothing else, a read-only root filesystem with an
emptyDir for each path it does write.

``spec.template.securityContext`` (a PodSecurityContext) is merged over our pod-level
defaults field by field: a field the operator sets wins, the others keep our value.
The container-level settings (no escalation, no capabilities, read-only root) have no
override surface: the spec exposes no containers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from shared.storage_providers.base import StorageProvider

SECCOMP_RUNTIME_DEFAULT: Final = {"type": "RuntimeDefault"}
#: Bound on each scratch emptyDir: a server writes little there; a runaway write is
#: evicted rather than filling the node's disk.
WRITABLE_PATH_SIZE_LIMIT: Final = "1Gi"


def default_pod_security_context(provider: StorageProvider) -> dict[str, Any]:
    """Our pod-level securityContext: the provider's non-root user (when known) and the
    runtime's default seccomp profile."""
    ctx: dict[str, Any] = {}
    if provider.run_as_user is not None:
        ctx["runAsNonRoot"] = True
        ctx["runAsUser"] = provider.run_as_user
        ctx["runAsGroup"] = provider.run_as_user
        # The emptyDirs are group-owned by this gid, so the server can write them.
        ctx["fsGroup"] = provider.run_as_user
    ctx["seccompProfile"] = dict(SECCOMP_RUNTIME_DEFAULT)
    return ctx


def merge_pod_security_context(
    defaults: Mapping[str, Any], override: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``override`` (spec.template.securityContext) merged over ``defaults`` field by
    field: each top-level field the operator sets replaces ours whole (seccompProfile,
    seLinuxOptions and the like are unions, merged as a unit); a field set to null
    keeps ours; the others are kept."""
    out = copy.deepcopy(dict(defaults))
    for key, value in (override or {}).items():
        if value is not None:
            out[key] = copy.deepcopy(value)
    return out


def container_security_context(provider: StorageProvider) -> dict[str, Any]:
    """The container-level settings Pod Security ``restricted`` requires of every
    container, plus a read-only root filesystem where the provider writes only to its
    emptyDirs."""
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if provider.read_only_root_filesystem:
        ctx["readOnlyRootFilesystem"] = True
    return ctx


def writable_volumes(provider: StorageProvider) -> list[dict[str, Any]]:
    """One size-bounded emptyDir per path the provider writes."""
    return [
        {"name": name, "emptyDir": {"sizeLimit": WRITABLE_PATH_SIZE_LIMIT}}
        for name, _ in provider.writable_paths
    ]


def writable_mounts(provider: StorageProvider) -> list[dict[str, Any]]:
    return [{"name": name, "mountPath": path} for name, path in provider.writable_paths]


def container_env(provider: StorageProvider) -> list[dict[str, Any]]:
    return [{"name": name, "value": value} for name, value in provider.env]
