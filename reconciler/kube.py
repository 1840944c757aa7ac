"""The reconciler's name for the shared Kubernetes client (``from reconciler import
kube as k``): the client, its Protocol and the resource table live in
:mod:`kubeio.client`, the connection (flag, in-cluster, KUBECONFIG,
~/.kube/config) in :mod:`kubeio.access`. Re-exported here so the reconciler's
modules keep one short import."""

from __future__ import annotations

from kubeio.client import (
    BY_KIND,
    CACHEBACKENDS,
    DEPLOYMENTS,
    EVENTS,
    FIELD_MANAGER,
    HPAS,
    JSON_PATCH,
    LEASES,
    MERGE_PATCH,
    NETWORKPOLICIES,
    PODS,
    REPLICASETS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    ApiError,
    Kube,
    KubeClient,
    Resource,
)

__all__ = [
    "BY_KIND",
    "CACHEBACKENDS",
    "DEPLOYMENTS",
    "EVENTS",
    "FIELD_MANAGER",
    "HPAS",
    "JSON_PATCH",
    "LEASES",
    "MERGE_PATCH",
    "NETWORKPOLICIES",
    "PODS",
    "REPLICASETS",
    "SECRETS",
    "SERVICES",
    "STATEFULSETS",
    "ApiError",
    "Kube",
    "KubeClient",
    "Resource",
]
