"""Run every check: read what each needs (read-only), then judge with the pure checks."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from icache_install.doctor import backends as cb_checks
from icache_install.doctor import install, pods, versions
from icache_install.doctor.findings import Finding, ObjectRef, finding
from icache_install.doctor.reader import CRDS, ClusterReader, ReadError
from kubeio import client as kc

T = TypeVar("T")


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
    names = scope.names
    out: list[Finding] = []
    ns = names.namespace

    crd, _ = _read(
        out,
        ObjectRef("CustomResourceDefinition", install.CRD_NAME),
        lambda: reader.get(CRDS, None, install.CRD_NAME),
        None,
    )
    out += install.check_crd(crd) if _ok(out, "CustomResourceDefinition") else []

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
    out += install.check_webhook_configs(configs, names)

    secret, secret_ok = _read(
        out,
        ObjectRef("Secret", names.tls_secret, ns),
        lambda: reader.get(kc.SECRETS, ns, names.tls_secret),
        None,
    )
    if secret_ok:
        out += install.check_certificates(configs, secret, names, reader.now())

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
    out += install.check_deployments(deployments, names)

    lease, lease_ok = _read(
        out,
        ObjectRef("Lease", names.lease, ns),
        lambda: reader.get(kc.LEASES, ns, names.lease),
        None,
    )
    if lease_ok:
        out += install.check_lease(lease, names, reader.now())
    if names.redis_secret:
        exists, ok = _read(
            out,
            ObjectRef("Secret", names.redis_secret, ns),
            lambda: reader.exists(kc.SECRETS, ns, names.redis_secret),
            True,
        )
        if ok:
            out += install.check_redis_secret(exists, names)

    webhook_known = names.webhook_deployment in deployments
    webhook_deployment = deployments.get(names.webhook_deployment)
    webhook = pods.WebhookState(
        available=webhook_deployment is not None
        and install.available_since(webhook_deployment) is not None,
        available_since=install.available_since(webhook_deployment),
        known=webhook_known,
    )

    where = ObjectRef("CacheBackend", "*", scope.namespace or "")
    none: list[dict[str, Any]] = []
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
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pod_list:
        by_ns[str((pod.get("metadata") or {}).get("namespace", ""))].append(pod)
    backends_by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for backend in backends:
        backends_by_ns[cb_checks.ref_of(backend).namespace].append(backend)

    # The kernel-check verdicts are in the pods' status: the pods of a namespace are read
    # in full only when one of its backends has an injected pod that runs the check.
    full_pods: dict[str, list[dict[str, Any]] | None] = {}
    for backend in sorted(backends, key=cb_checks.key_of):
        namespace = cb_checks.ref_of(backend).namespace
        out += cb_checks.check_backend(backend, by_ns[namespace])
        if not versions.wants_versions(backend, by_ns[namespace]):
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
            out += versions.check_versions(backend, namespace_pods)
    for namespace in sorted(backends_by_ns):
        out += cb_checks.check_overlaps(backends_by_ns[namespace], by_ns[namespace])
    checked = pods.engine_pods(pod_list, backends)
    for engine_pod in sorted(checked, key=cb_checks.key_of):
        namespace = str((engine_pod.get("metadata") or {}).get("namespace", ""))
        out += pods.check_pod(engine_pod, backends_by_ns[namespace], webhook)
    return Diagnosis(out, backends, len(checked), reader.requests)


def _ok(out: list[Finding], kind: str) -> bool:
    """False when the last read of ``kind`` failed (a doctor finding says so)."""
    return not any(f.code.startswith("doctor.") and f.object.kind == kind for f in out)
