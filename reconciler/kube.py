"""The reconciler's old name for the shared Kubernetes client: the client, its
Protocol and the resource table live in :mod:`shared.kubeclient`, the connection
(flag, in-cluster, KUBECONFIG, ~/.kube/config) in :mod:`shared.kubeaccess`. Import
those; this re-export goes once reconcile.py and metrics.py no longer use it."""

from __future__ import annotations

from shared.kubeclient import (
    BY_KIND,
    CACHEBACKENDS,
    DEPLOYMENTS,
    EVENTS,
    FIELD_MANAGER,
    HPAS,
    JSON_PATCH,
    LEASES,
    MERGE_PATCH,
    PODS,
    REPLICASETS,
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
    "PODS",
    "REPLICASETS",
    "SERVICES",
    "STATEFULSETS",
    "ApiError",
    "Kube",
    "KubeClient",
    "Resource",
]
