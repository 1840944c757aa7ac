"""What a reconcile reads, scoped to one backend: the :class:`ClusterReads` contract and
its API-server implementation, :class:`LiveReads`.

Every read names the objects that can matter to one backend and lets the API server
filter them; none lists a whole namespace:

=====================  ==========================================================
read                   how (LiveReads)
=====================  ==========================================================
the CacheBackend       GET
consumer backends      LIST CacheBackends of each namespace the owner consents to
owned objects          LIST each owned kind by our labels (managed-by, cachebackend);
                       GET owned Secrets by the names the backend renders
engine pods            LIST pods by spec.engineSelector, metadata only
injected pods          LIST pods by the injected-by-uid label
cache-server pods      LIST pods by the managed workload's selector
engine Deployments     LIST ReplicaSets by spec.engineSelector, metadata only (a
                       Deployment's ReplicaSets carry its pod-template labels), then
                       GET each Deployment they name
=====================  ==========================================================

``fresh=False`` reads of pods, ReplicaSets and engine Deployments ask for
``resourceVersion=0`` (any recent version, from the API server's watch cache): they
feed status only — counts and advisory conditions a later reconcile corrects — and
the one write they could lead to, the engine cascade, is confirmed with ``fresh``
reads first. The CacheBackend and owned objects are always read consistently.

The watch-cache implementation is :class:`reconciler.watch.cluster_cache.CachedReads`;
docs/architecture.md ("Reads") says which the worker uses and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from kubeio import client as k
from shared import constants as c
from shared.labels import equality_selector, labels_match
from shared.objects import meta, metadata
from shared.storage_providers.redis import RedisStorageProvider
from shared.storage_providers.render import (
    LABEL_CACHEBACKEND,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
    owned_secret_names,
    owned_selector,
    safe_label_value,
)

# The NetworkPolicy of an isolable provider is owned like the workload: listed by the
# same labels, never a namespace's whole set. The dispatcher watches these kinds too.
DISPATCHER_OWNED_RESOURCES: Final = (
    k.NETWORKPOLICIES,
    k.DEPLOYMENTS,
    k.STATEFULSETS,
    k.SERVICES,
    k.HPAS,
)
# Owned kinds read by listing (and, in the worker, watching) by our labels.
LISTED_OWNED_RESOURCES: Final = DISPATCHER_OWNED_RESOURCES
# Owned Secrets (a managed Redis's password, a consumer's copy of it) are never listed
# nor watched: RBAC cannot scope a list or a watch to our labels, and the worker may
# not read every Secret of the cluster. They are read by the names a backend renders
# (owned_secret_names); a change to one is repaired by the dispatcher's resync.
NAMED_OWNED_RESOURCES: Final = (k.SECRETS,)
# Every kind a reconcile writes.
OWNED_RESOURCES: Final = (*NAMED_OWNED_RESOURCES, *LISTED_OWNED_RESOURCES)
ANY_VERSION: Final = "0"


class ClusterReads(Protocol):
    """The reads of one reconcile. Failures are :class:`kubeio.client.ApiError`."""

    def backend(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The CacheBackend, or None when it does not exist."""

    def owned(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Objects of the listed owned kinds (LISTED_OWNED_RESOURCES) carrying the
        backend's labels (each with its ``kind``); ownership by uid is the caller's
        check. Secrets are not among them: owned_secrets."""

    def owned_secrets(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The backend's Secrets, each read by the name it renders (owned_secret_names),
        kept when it carries the backend's labels."""

    def engine_pods(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Pods whose labels contain ``labels`` (a valid, non-empty selector): at least
        their metadata (labels, the decision annotations, owner references)."""

    def injected_pods(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """Whole pods labelled injected-by-uid=``uid`` (the annotations still decide)."""

    def workload_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        """Whole pods whose labels contain ``selector`` (the managed workload's)."""

    def engine_deployments(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Deployments whose pod-template labels contain ``labels``: at least
        metadata.name, spec.replicas and spec.template.metadata.labels."""

    def backends_in(self, namespace: str) -> list[dict[str, Any]]:
        """Every CacheBackend of ``namespace`` (an owner's candidate consumers, in the
        namespaces it consents to)."""

    def after_write(
        self, res: k.Resource, namespace: str, name: str, before: str, after: str | None
    ) -> None:
        """A reconcile wrote the object (resourceVersion ``before`` → ``after``; after
        None: deleted). A cache waits, briefly, until it shows the write."""


def spec_changed(cb_obj: Mapping[str, Any]) -> bool:
    """The backend's spec changed since the last pass that published its status
    (metadata.generation ahead of status.observedGeneration, or never published)."""
    generation = metadata(cb_obj).get("generation")
    observed = (cb_obj.get("status") or {}).get("observedGeneration")
    return generation is None or generation != observed


def reads_owned_secrets(
    provider: str | None,
    listed: list[dict[str, Any]],
    *,
    spec_changed: bool,
    first_read: bool,
) -> bool:
    """Whether a reconcile must read the backend's Secrets (a GET each: they are never
    cached). When it may hold one: its provider is Redis (a managed tier's password, or
    a consumer's copy); one of its listed objects is a Redis tier's (a provider switch,
    whose Secret is to be shed); its spec changed since its status was last published
    (the pass after a consumer left its tier: host-only, another provider, whose copy is
    to be shed); or this worker has not read them yet since it started (a copy made
    under the old name by a consumer that had left before an upgrade). Any other
    backend's idle reconcile stays free of requests."""
    if provider == c.PROVIDER_REDIS or spec_changed or first_read:
        return True
    return any(
        (metadata(obj).get("labels") or {}).get(LABEL_NAME) == RedisStorageProvider.component
        for obj in listed
    )


def carries_owned_labels(obj: Mapping[str, Any], cb_name: str) -> bool:
    """The labels owned_selector(cb_name) selects by (ownership by uid is the caller's)."""
    labels = metadata(obj).get("labels") or {}
    return labels_match(
        {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CACHEBACKEND: safe_label_value(cb_name)}, labels
    )


def template_labels(deployment: dict[str, Any]) -> dict[str, str]:
    spec = deployment.get("spec") or {}
    return dict(meta(spec.get("template")).labels)


def controller_name(obj: dict[str, Any], kind: str) -> str | None:
    """Name of the controller owner reference of ``kind`` on ``obj``."""
    for ref in metadata(obj).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return str(ref.get("name"))
    return None


def with_kind(res: k.Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """List items carry no kind/apiVersion; watch events do. Give every one both."""
    if obj.get("kind") == res.kind:
        return obj
    return {**obj, "apiVersion": res.api_version, "kind": res.kind}


class LiveReads:
    """:class:`ClusterReads` straight from the API server, scoped by label selectors."""

    def __init__(self, kube: k.KubeClient, *, fresh: bool = False) -> None:
        self.kube = kube
        self.fresh = fresh

    @property
    def _rv(self) -> str | None:
        return None if self.fresh else ANY_VERSION

    def backend(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.kube.get_or_none(k.CACHEBACKENDS, namespace, name)

    def owned(self, namespace: str, name: str) -> list[dict[str, Any]]:
        selector = owned_selector(name)
        return [
            with_kind(res, item)
            for res in LISTED_OWNED_RESOURCES
            for item in self.kube.list(res, namespace, label_selector=selector).get("items") or []
        ]

    def owned_secrets(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The backend's Secrets, each read by the name it renders (a GET: the worker
        may not list Secrets), kept when it carries the backend's labels."""
        out = []
        for secret_name in owned_secret_names(name):
            secret = self.kube.get_or_none(k.SECRETS, namespace, secret_name)
            if secret is not None and carries_owned_labels(secret, name):
                out.append(with_kind(k.SECRETS, secret))
        return out

    def backends_in(self, namespace: str) -> list[dict[str, Any]]:
        items = self.kube.list(k.CACHEBACKENDS, namespace).get("items") or []
        return [with_kind(k.CACHEBACKENDS, item) for item in items]

    def _items(
        self, res: k.Resource, namespace: str, selector: str, *, metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        """The items of one scoped LIST of ``namespace`` (at this pass's resourceVersion)."""
        return (
            self.kube.list(
                res,
                namespace,
                label_selector=selector,
                resource_version=self._rv,
                metadata_only=metadata_only,
            ).get("items")
            or []
        )

    def engine_pods(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        return self._items(k.PODS, namespace, equality_selector(labels), metadata_only=True)

    def injected_pods(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        return self._items(k.PODS, namespace, f"{c.LABEL_INJECTED_BY_UID}={uid}")

    def workload_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        if not selector:
            return []
        return self._items(k.PODS, namespace, equality_selector(selector))

    def engine_deployments(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        replicasets = self._items(
            k.REPLICASETS, namespace, equality_selector(labels), metadata_only=True
        )
        names = sorted(
            {n for rs in replicasets if (n := controller_name(rs, "Deployment")) is not None}
        )
        out = []
        for name in names:
            deployment = self.kube.get_or_none(k.DEPLOYMENTS, namespace, name)
            if deployment is not None and labels_match(labels, template_labels(deployment)):
                out.append(deployment)
        return out

    def after_write(
        self, res: k.Resource, namespace: str, name: str, before: str, after: str | None
    ) -> None:
        """Reads go to the API server: the next one sees the write."""
