"""The API paths of every resource the project reads or writes: one table of
:class:`Resource`, built from :mod:`shared.constants`, that both faces of the API
client (``kubeio.client.Kube`` and ``kubeio.async_client.ApiServer``) take their
paths from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from shared import constants as c


@dataclass(frozen=True)
class Resource:
    """An API resource and the paths of its collection and its objects. Namespace and
    name are percent-encoded as path segments."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def _base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        """The collection in ``namespace``; every namespace's (or a cluster-scoped
        resource's) when it is None or empty."""
        if self.namespaced and namespace:
            return f"{self._base()}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{self._base()}/{self.plural}"

    def item(self, namespace: str | None, name: str) -> str:
        return f"{self.collection(namespace)}/{quote(name, safe='')}"


# Every resource the project reads or writes: the one table its API paths come from.
CACHEBACKENDS: Final = Resource(c.GROUP, c.VERSION, c.PLURAL, c.KIND)
DEPLOYMENTS: Final = Resource("apps", "v1", "deployments", "Deployment")
STATEFULSETS: Final = Resource("apps", "v1", "statefulsets", "StatefulSet")
REPLICASETS: Final = Resource("apps", "v1", "replicasets", "ReplicaSet")
SERVICES: Final = Resource("", "v1", "services", "Service")
HPAS: Final = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
PODS: Final = Resource("", "v1", "pods", "Pod")
EVENTS: Final = Resource("", "v1", "events", "Event")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
NETWORKPOLICIES: Final = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
MUTATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)

BY_KIND: Final[dict[str, Resource]] = {
    r.kind: r
    for r in (
        CACHEBACKENDS,
        DEPLOYMENTS,
        STATEFULSETS,
        REPLICASETS,
        SERVICES,
        HPAS,
        PODS,
        EVENTS,
        LEASES,
        SECRETS,
        NETWORKPOLICIES,
        MUTATING_WEBHOOK_CONFIGURATIONS,
        VALIDATING_WEBHOOK_CONFIGURATIONS,
        SUBJECT_ACCESS_REVIEWS,
    )
}
