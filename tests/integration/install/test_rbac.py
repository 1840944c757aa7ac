"""Least privilege, checked by the real RBAC authorizer.

The install's ServiceAccounts and RBAC objects are applied for real; then a
SubjectAccessReview per (identity, request) says whether the API server would
allow it. Each process can do what it needs and is denied a sample of what it must
not. One real request per writer (as the worker, through a client certificate for
its ServiceAccount identity) shows that server-side apply creates objects with the
``patch`` verb alone, which is all the worker is granted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from icache_install.manifests_cli import render_manifests
from kubeio.client import ApiError, Kube
from tests.harness.controlplane import ControlPlane, wait_until
from tests.integration.manifest_apply import Applier

# The install rendered into a namespace of its own, with its cluster-scoped RBAC
# objects renamed: the same rules and bindings, without touching the ClusterRoles of
# the same names other tests (tests/e2e) install into this shared control plane.
_RUN = uuid.uuid4().hex[:6]
NAMESPACE = f"icache-rbac-{_RUN}"
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
OTHER_NAMESPACE = "team-a"  # any namespace CacheBackends and engine pods live in
LEASE = "inference-cache-dispatcher"


@dataclass(frozen=True)
class Request:
    verb: str
    resource: str
    group: str = ""
    namespace: str = OTHER_NAMESPACE
    subresource: str = ""
    name: str = ""

    def __str__(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{res}{named}{where}"


def _service_account(docs: list[dict[str, Any]], container_args0: str) -> str:
    (deployment,) = [
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["spec"]["template"]["spec"]["containers"][0]["args"][0] == container_args0
    ]
    return str(deployment["spec"]["template"]["spec"]["serviceAccountName"])


def _isolated(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["name"] += f"-{_RUN}"
        if doc["kind"] == "ClusterRoleBinding" and doc["roleRef"]["kind"] == "ClusterRole":
            doc["roleRef"]["name"] += f"-{_RUN}"
    return docs


DOCS = _isolated(render_manifests(namespace=NAMESPACE))
WEBHOOK_SA = _service_account(DOCS, "webhook")
WORKER_SA = _service_account(DOCS, "worker")
DISPATCHER_SA = _service_account(DOCS, "dispatcher")
(ROTATION_JOB,) = [d for d in DOCS if d["kind"] == "CronJob"]
ROTATION_SA = str(
    ROTATION_JOB["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"]
)
TLS_SECRETS = ("inference-cache-webhook-tls", "inference-cache-webhook-tls-ca")
ADMISSION = "admissionregistration.k8s.io"


def user(sa: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{sa}"


GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]

CB = "inferencecache.io"
ALLOWED: dict[str, list[Request]] = {
    WEBHOOK_SA: [
        Request("get", "cachebackends", CB),
        Request("list", "cachebackends", CB),
        Request("list", "cachebackends", CB, namespace=""),
        # A CacheBackend is as powerful as a Pod create: may its writer create its workload?
        Request("create", "subjectaccessreviews", "authorization.k8s.io", namespace=""),
    ],
    WORKER_SA: [
        Request("get", "cachebackends", CB),
        # The /snapshot poller attributes replicas by listing a namespace's backends.
        Request("list", "cachebackends", CB),
        Request("update", "cachebackends", CB, subresource="status"),
        # Server-side apply is a PATCH; it creates missing objects (shown below).
        *(
            Request(verb, resource, group)
            for resource, group in [
                ("deployments", "apps"),
                ("statefulsets", "apps"),
                ("services", ""),
                ("horizontalpodautoscalers", "autoscaling"),
                # A tier's NetworkPolicy.
                ("networkpolicies", "networking.k8s.io"),
            ]
            # get: the ownership check before a first write (never adopt a foreign object).
            for verb in ("get", "list", "patch", "delete")
        ),
        # A managed Redis's password Secret and a consumer's copy of it: read, created,
        # patched and deleted by the name it renders, never listed or watched.
        *(
            Request(verb, "secrets", namespace=NAMESPACE, name="chat-redis-auth")
            for verb in ("get", "create", "patch", "delete")
        ),
        Request("list", "pods"),
        Request("create", "events"),
        # A managed StatefulSet's FailedCreate Events (why it cannot create its pods).
        Request("list", "events"),
        # The cascade finds the engine Deployment owning an injected pod through its
        # ReplicaSet, then rolls that Deployment (a merge patch of its pod template).
        # Engine Deployments are read through their ReplicaSets (watched by selector).
        Request("list", "replicasets", "apps"),
        Request("watch", "replicasets", "apps"),
    ],
    DISPATCHER_SA: [
        *(
            Request(verb, resource, group, namespace="")
            for resource, group in [
                ("cachebackends", CB),
                ("deployments", "apps"),
                ("statefulsets", "apps"),
                ("services", ""),
                ("horizontalpodautoscalers", "autoscaling"),
                ("networkpolicies", "networking.k8s.io"),
                # Injected engine / cache-server pods enqueue their backend; the
                # engine-pod events controller reads the webhook's annotations.
                ("pods", ""),
            ]
            for verb in ("list", "watch")
        ),
        # Engine ReplicaSets, watched by the engine selectors in the backends'
        # namespaces: a scale or a new template wakes the selecting backends.
        Request("list", "replicasets", "apps"),
        Request("watch", "replicasets", "apps"),
        # InjectedByCacheBackend / SkippedByOperator on pods, checked against the live CR.
        Request("create", "events"),
        Request("get", "cachebackends", CB),
        Request("create", "leases", "coordination.k8s.io", namespace=NAMESPACE),
        Request("get", "leases", "coordination.k8s.io", namespace=NAMESPACE, name=LEASE),
        Request("update", "leases", "coordination.k8s.io", namespace=NAMESPACE, name=LEASE),
    ],
    # The certificate-rotation CronJob (`icache certs`): its two Secrets and the two
    # webhook configurations, by name.
    ROTATION_SA: [
        *(
            Request(verb, "secrets", namespace=NAMESPACE, name=name)
            for name in TLS_SECRETS
            for verb in ("get", "update")
        ),
        *(
            Request(verb, f"{kind}webhookconfigurations", ADMISSION, namespace="", name=name)
            for kind, name in (
                ("mutating", "inference-cache-mutating"),
                ("validating", "inference-cache-validating"),
            )
            for verb in ("get", "patch")
        ),
    ],
}

# A sample of what each must not do; every one of them would widen the blast
# radius of a compromised pod.
# Reading Secrets: denied to every process but the worker, which owns the password
# Secret of each managed Redis (RBAC cannot scope a read to the ones it labels; see
# docs/decisions.md, "Managed tier isolation").
SECRET_READS = [
    Request("get", "secrets", namespace=NAMESPACE),
    Request("list", "secrets", namespace=""),
    Request("get", "secrets", namespace="kube-system"),
]
EVERYONE_DENIED = [
    Request("delete", "namespaces", namespace=""),
    Request("create", "pods"),
    Request("create", "clusterrolebindings", "rbac.authorization.k8s.io", namespace=""),
    Request("escalate", "clusterroles", "rbac.authorization.k8s.io", namespace=""),
    Request("impersonate", "users", namespace=""),
    Request(
        "update", "mutatingwebhookconfigurations", "admissionregistration.k8s.io", namespace=""
    ),
    Request("create", "serviceaccounts", subresource="token"),
]
DENIED: dict[str, list[Request]] = {
    ROTATION_SA: [
        *EVERYONE_DENIED,
        *SECRET_READS,
        Request("create", "secrets", namespace=NAMESPACE),
        Request("get", "secrets", namespace=NAMESPACE, name="inference-cache-redis-auth"),
        Request("delete", "secrets", namespace=NAMESPACE, name=TLS_SECRETS[0]),
        Request("get", "secrets", namespace="kube-system", name=TLS_SECRETS[0]),
        Request("list", "mutatingwebhookconfigurations", ADMISSION, namespace=""),
        Request("patch", "mutatingwebhookconfigurations", ADMISSION, namespace="", name="other"),
        Request(
            "delete",
            "validatingwebhookconfigurations",
            ADMISSION,
            namespace="",
            name="inference-cache-validating",
        ),
        Request("get", "cachebackends", CB),
    ],
    WEBHOOK_SA: [
        *EVERYONE_DENIED,
        *SECRET_READS,
        Request("update", "cachebackends", CB),
        Request("patch", "cachebackends", CB),
        Request("create", "cachebackends", CB),
        Request("delete", "cachebackends", CB),
        Request("watch", "cachebackends", CB),
        Request("update", "cachebackends", CB, subresource="status"),
        Request("list", "pods"),
        Request("create", "events"),
        Request("get", "leases", "coordination.k8s.io", namespace=NAMESPACE, name=LEASE),
        Request("create", "tokenreviews", "authentication.k8s.io", namespace=""),
    ],
    WORKER_SA: [
        *EVERYONE_DENIED,
        # It applies Secrets (a patch) and never replaces one: no update. Least
        # privilege on Secrets: no list or watch, in a namespace or cluster-wide.
        Request("update", "secrets", namespace=NAMESPACE, name="inference-cache-redis-auth"),
        Request("list", "secrets", namespace=""),
        Request("list", "secrets", namespace=NAMESPACE),
        Request("watch", "secrets", namespace=""),
        Request("watch", "secrets", namespace=NAMESPACE),
        Request("update", "cachebackends", CB),
        Request("delete", "cachebackends", CB),
        Request("patch", "pods"),
        Request("delete", "pods"),
        Request("update", "leases", "coordination.k8s.io", namespace=NAMESPACE, name=LEASE),
        Request("patch", "configmaps"),
        Request("patch", "replicasets", "apps"),
        Request("delete", "replicasets", "apps"),
        # Events are listed by field selector, never watched, patched or deleted.
        Request("watch", "events"),
        Request("delete", "events"),
    ],
    DISPATCHER_SA: [
        *EVERYONE_DENIED,
        *SECRET_READS,
        Request("update", "cachebackends", CB),
        Request("update", "cachebackends", CB, subresource="status"),
        Request("patch", "deployments", "apps"),
        Request("delete", "services"),
        # Events are recorded once (409 on a repeat), never patched or deleted.
        Request("patch", "events"),
        Request("delete", "events"),
        Request("patch", "pods"),
        Request("delete", "pods"),
        # Engine ReplicaSets: listed and watched by selector only, never read or changed.
        Request("get", "replicasets", "apps"),
        Request("patch", "replicasets", "apps"),
        # Leases: only its own, only in its own namespace.
        Request("update", "leases", "coordination.k8s.io", namespace=NAMESPACE, name="other"),
        Request("delete", "leases", "coordination.k8s.io", namespace=NAMESPACE, name=LEASE),
        Request("create", "leases", "coordination.k8s.io", namespace="kube-system"),
        Request("update", "leases", "coordination.k8s.io", namespace="kube-node-lease", name=LEASE),
    ],
}


@pytest.fixture(scope="module")
def rbac_installed(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], kube: Kube
) -> None:
    applier = Applier(kube_api_client)
    for doc in DOCS:
        if doc["kind"] in RBAC_KINDS:
            applier.apply(doc, dry_run=False)
    # The RBAC authorizer reads Roles, ClusterRoles and their bindings through one
    # informer per kind, so one binding seen says nothing about another: wait until a
    # request through every binding is allowed. Each process's first rule comes from its
    # ClusterRoleBinding; the dispatcher's Lease rules from its RoleBinding.
    lease = Request("get", "leases", "coordination.k8s.io", namespace=NAMESPACE, name=LEASE)
    through_each_binding = [(sa, reqs[0]) for sa, reqs in ALLOWED.items()]
    through_each_binding.append((DISPATCHER_SA, lease))
    through_each_binding.append((ROTATION_SA, ALLOWED[ROTATION_SA][-1]))  # its ClusterRole
    bindings = [d for d in DOCS if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(through_each_binding) == len(bindings), "one request per binding"
    wait_until(
        lambda: all(_allowed(kube, sa, req) for sa, req in through_each_binding),
        timeout=30,
        description="the RBAC authorizer to see the install's bindings",
    )


def _allowed(kube: Kube, sa: str, req: Request) -> bool:
    attributes = {
        "verb": req.verb,
        "group": req.group,
        "resource": req.resource,
        "subresource": req.subresource,
        "namespace": req.namespace,
        "name": req.name,
    }
    review = kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user(sa),
                "groups": GROUPS,
                "resourceAttributes": {k: v for k, v in attributes.items() if v},
            },
        },
    )
    return bool(review["status"].get("allowed"))


def test_each_process_has_its_own_service_account() -> None:
    assert len({WEBHOOK_SA, WORKER_SA, DISPATCHER_SA, ROTATION_SA}) == 4


@pytest.mark.parametrize("sa", sorted(ALLOWED))
def test_each_process_may_do_what_it_needs(kube: Kube, rbac_installed: None, sa: str) -> None:
    refused = [str(r) for r in ALLOWED[sa] if not _allowed(kube, sa, r)]
    assert refused == [], f"{sa} lacks: {refused}"


@pytest.mark.parametrize("sa", sorted(DENIED))
def test_each_process_is_denied_what_it_must_not_do(
    kube: Kube, rbac_installed: None, sa: str
) -> None:
    allowed = [str(r) for r in DENIED[sa] if _allowed(kube, sa, r)]
    assert allowed == [], f"{sa} may: {allowed}"


def test_the_webhook_role_is_exactly_read_only_on_cachebackends(kube: Kube) -> None:
    """No wildcard or extra rule can hide behind the sampled checks. Besides reading
    CacheBackends it may only ask SubjectAccessReviews (may the writer of a CacheBackend
    create the workload it shapes?)."""
    (binding,) = [
        d
        for d in DOCS
        if d["kind"] == "ClusterRoleBinding" and d["subjects"][0]["name"] == WEBHOOK_SA
    ]
    (role,) = [
        d
        for d in DOCS
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == binding["roleRef"]["name"]
    ]
    assert role["rules"] == [
        {"apiGroups": [CB], "resources": ["cachebackends"], "verbs": ["get", "list"]},
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]


def test_no_rule_uses_wildcards() -> None:
    for doc in DOCS:
        for rule in doc.get("rules") or []:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), (doc["metadata"]["name"], rule)


def test_server_side_apply_creates_with_patch_alone_as_the_worker(
    control_plane: ControlPlane, rbac_installed: None, namespace: str
) -> None:
    """The worker holds no ``create`` on its workloads: server-side apply of a missing
    object is authorised as ``patch`` and creates it. Done for real, as the worker."""
    api = control_plane.api_client_for(user(WORKER_SA), GROUPS[:2])
    try:
        as_worker = Applier(api)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "provider", "namespace": namespace},
            "spec": {"ports": [{"port": 6379}], "selector": {"app": "provider"}},
        }
        created = as_worker.apply(service, dry_run=False)
        assert created["metadata"]["uid"]
        # ... and is refused what it does not hold.
        with pytest.raises(ApiError) as refused:
            as_worker.kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert refused.value.status == 403
    finally:
        api.close()
