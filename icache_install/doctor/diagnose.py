"""Run every check: read what each needs (read-only), then judge with the pure checks."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from icache_install.doctor import backends as cb_checks
from icache_install.doctor import host_memory, install, pods, versions
from icache_install.doctor.findings import Finding, ObjectRef, finding
from icache_install.doctor.reader import CRDS, ClusterReader, ReadError
from kubeio import client as kc
from shared.api.crd import CRD_NAME
from shared.objects import meta

T = TypeVar("T")
Objects = list[dict[str, Any]]


@dataclass
class Scope:
    """``namespace`` None: every namespace (-A)."""

    namespace: str | None
    names: install.InstallNames = field(default_factory=install.InstallNames)


@dataclass
class Diagnosis:
    findings: list[Finding]
    backends: list[dict[str, Any]]
    pods_checked: int
    requests: int


def _read(
    out: list[Finding], what: ObjectRef, call: Callable[[], T], fallback: T
) -> tuple[T, bool]:
    """``call()``, or ``fallback`` with a doctor finding when the read fails."""
    try:
        return call(), True
    except ReadError as exc:
        code = "doctor.ReadForbidden" if exc.forbidden else "doctor.ReadFailed"
        out.append(
            finding(
                code,
                what,
                f"{exc}: the checks that need it were skipped",
                "grant the doctor get/list on it (docs/doctor.md lists the RBAC it needs)"
                if exc.forbidden
                else "retry; check the API server",
            )
        )
        return fallback, False


def diagnose(reader: ClusterReader, scope: Scope) -> Diagnosis:
    """Every check, in a fixed order: the install, then each backend, then each engine
    pod. A read that fails is a doctor finding and skips only the checks that need it."""
    out: list[Finding] = []
    crd, webhook = _check_install(reader, scope.names, out)
    where = ObjectRef("CacheBackend", "*", scope.namespace or "")
    none: Objects = []
    backends = none
    if crd is not None:
        backends, _ = _read(
            out, where, functools.partial(reader.list, kc.CACHEBACKENDS, scope.namespace), none
        )
    # Engine pods, metadata only: the namespace asked for, or (-A) every namespace,
    # since a pod wired by a since-deleted backend may be where no backend is left.
    pod_list, _ = _read(
        out,
        ObjectRef("Pod", "*", scope.namespace or ""),
        functools.partial(reader.list, kc.PODS, scope.namespace, metadata_only=True),
        none,
    )
    pods_by_ns = _by_namespace(pod_list)
    backends_by_ns = _by_namespace(backends)
    _check_backends(reader, backends, pods_by_ns, out)
    for namespace in sorted(backends_by_ns):
        out += cb_checks.check_overlaps(backends_by_ns[namespace], pods_by_ns[namespace])
    checked = pods.engine_pods(pod_list, backends)
    for engine_pod in sorted(checked, key=cb_checks.key_of):
        out += pods.check_pod(engine_pod, backends_by_ns[meta(engine_pod).namespace], webhook)
    return Diagnosis(out, backends, len(checked), reader.requests)


def _check_install(
    reader: ClusterReader, names: install.InstallNames, out: list[Finding]
) -> tuple[dict[str, Any] | None, pods.WebhookState]:
    """The install's objects, in order: CRD, webhook configurations, TLS Secret,
    Deployments, Lease, Redis Secret. Returns the CRD (None: absent or unread) and what
    the cluster records of the Pod webhook's availability."""
    ns = names.namespace
    crd, _ = _read(
        out,
        ObjectRef("CustomResourceDefinition", CRD_NAME),
        lambda: reader.get(CRDS, None, CRD_NAME),
        None,
    )
    out += install.check_crd(crd) if _ok(out, "CustomResourceDefinition") else []

    configs = _read_webhook_configs(reader, names, out)
    out += install.check_webhook_configs(configs, names)

    secret, secret_ok = _read(
        out,
        ObjectRef("Secret", names.tls_secret, ns),
        lambda: reader.get(kc.SECRETS, ns, names.tls_secret),
        None,
    )
    if secret_ok:
        out += install.check_certificates(configs, secret, names, reader.now())

    deployments = _read_deployments(reader, names, out)
    out += install.check_deployments(deployments, names)

    lease, lease_ok = _read(
        out,
        ObjectRef("Lease", names.lease, ns),
        lambda: reader.get(kc.LEASES, ns, names.lease),
        None,
    )
    if lease_ok:
        out += install.check_leader_lease(lease, names, reader.now())
    if names.redis_secret:
        exists, ok = _read(
            out,
            ObjectRef("Secret", names.redis_secret, ns),
            lambda: reader.exists(kc.SECRETS, ns, names.redis_secret),
            True,
        )
        if ok:
            out += install.check_redis_secret(exists, names)
    return crd, _webhook_state(deployments, names)


def _read_webhook_configs(
    reader: ClusterReader, names: install.InstallNames, out: list[Finding]
) -> dict[str, dict[str, Any] | None]:
    """The two webhook configurations by kind; one that could not be read is left out."""
    configs: dict[str, dict[str, Any] | None] = {}
    for kind, name in (
        ("MutatingWebhookConfiguration", names.mutating_config),
        ("ValidatingWebhookConfiguration", names.validating_config),
    ):
        config, ok = _read(
            out,
            ObjectRef(kind, name),
            functools.partial(reader.get, kc.BY_KIND[kind], None, name),
            None,
        )
        if ok:
            configs[kind] = config
    return configs


def _read_deployments(
    reader: ClusterReader, names: install.InstallNames, out: list[Finding]
) -> dict[str, dict[str, Any] | None]:
    """The install's Deployments by name; one that could not be read is left out."""
    ns = names.namespace
    deployments: dict[str, dict[str, Any] | None] = {}
    for name in names.deployments:
        deployment, ok = _read(
            out,
            ObjectRef("Deployment", name, ns),
            functools.partial(reader.get, kc.DEPLOYMENTS, ns, name),
            None,
        )
        if ok:
            deployments[name] = deployment
    return deployments


def _webhook_state(
    deployments: dict[str, dict[str, Any] | None], names: install.InstallNames
) -> pods.WebhookState:
    """The Pod webhook's availability as its Deployment records it (``known`` False:
    the Deployment could not be read)."""
    deployment = deployments.get(names.webhook_deployment)
    return pods.WebhookState(
        available=deployment is not None and install.available_since(deployment) is not None,
        available_since=install.available_since(deployment),
        known=names.webhook_deployment in deployments,
    )


def _by_namespace(objs: list[dict[str, Any]]) -> defaultdict[str, list[dict[str, Any]]]:
    """``objs`` grouped by namespace, in their order; an absent namespace reads as empty."""
    grouped: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objs:
        grouped[meta(obj).namespace].append(obj)
    return grouped


def _check_backends(
    reader: ClusterReader,
    backends: list[dict[str, Any]],
    pods_by_ns: defaultdict[str, list[dict[str, Any]]],
    out: list[Finding],
) -> None:
    """Each backend's checks, in key order. The kernel-check verdicts are in the pods'
    status and the pinned host memory in their spec: the pods of a namespace are read in
    full only when one of its backends has an injected pod, and once per namespace."""
    none: Objects = []
    full_pods: dict[str, Objects | None] = {}
    for backend in sorted(backends, key=cb_checks.key_of):
        namespace = cb_checks.ref_of(backend).namespace
        out += cb_checks.check_backend(backend, pods_by_ns[namespace])
        wants_versions = versions.wants_versions(backend, pods_by_ns[namespace])
        if not (wants_versions or host_memory.wants_pods(backend, pods_by_ns[namespace])):
            continue
        if namespace not in full_pods:
            listed, ok = _read(
                out,
                ObjectRef("Pod", "*", namespace),
                functools.partial(reader.list, kc.PODS, namespace),
                none,
            )
            full_pods[namespace] = listed if ok else None
        namespace_pods = full_pods[namespace]
        if namespace_pods is not None:
            if wants_versions:
                out += versions.check_versions(backend, namespace_pods)
            out += host_memory.check_host_memory(backend, namespace_pods)


def _ok(out: list[Finding], kind: str) -> bool:
    """False when the last read of ``kind`` failed (a doctor finding says so)."""
    return not any(f.code.startswith("doctor.") and f.object.kind == kind for f in out)
