"""On the real API server: a CacheBackend is as powerful as a Pod
create in its namespace, so the validating webhook lets only users who may create the
workload write a backend that shapes one, and only users who may create pods write a
backend at all or change what it puts in the engine pods it selects (rule
"Engine-shaping needs engine-level permission").

The real `icache webhook` runs as the install's webhook ServiceAccount (its RBAC from
manifests/, so the SubjectAccessReview permission is proven too) and the API server
calls it for requests made by real users, authenticated by client certificates and
authorised by real RBAC:

- alice may write CacheBackends but create neither Deployments nor pods;
- paul may also create pods;
- bob may also create Deployments and pods; carol also StatefulSets;
- dave gets bob's rights only through a group (the review forwards groups);
- sam may only write cachebackends/status: he cannot move where engines send their
  data (rule "Managed endpoints come from what we own", through the real Pod webhook).

Rule "one rule for what needs create pods": alice is refused every change that opens
a tier or moves its data; paul may make it; a label edit, narrowing consent and
restoring isolation stay free.
"""

from __future__ import annotations

import copy
import json
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from icache_install.manifests_cli import render_manifests
from kubeio.client import Kube
from tests.builders import new_cb
from tests.harness.controlplane import (
    ControlPlane,
    free_port,
    spawn_in_own_group,
    terminate_process_group,
    wait_until,
)
from tests.integration.manifest_apply import Applier
from tests.samples import ROOT
from tests.webhook_process import labelled_namespace, registered, run_webhook

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
SUFFIX = "workload-authz"
_RUN = uuid.uuid4().hex[:6]
SYSTEM_NS = f"ica-{_RUN}"  # the SA name must fit a 64-character CN
TEAM_GROUP = f"team-admins-{_RUN}"
MANAGED = {"provider": "LMCacheServer", "ownership": "Managed"}
RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"


def webhook_docs() -> list[dict[str, Any]]:
    """The install's webhook ServiceAccount and RBAC, in a namespace of their own, the
    cluster-scoped names suffixed (other tests install the same names)."""
    out = []
    for doc in render_manifests(namespace=SYSTEM_NS):
        if doc["kind"] == "Namespace" or (
            doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            and doc["metadata"]["name"] == "inference-cache-webhook"
        ):
            doc = copy.deepcopy(doc)
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                doc["metadata"]["name"] += f"-{_RUN}"
            if doc["kind"] == "ClusterRoleBinding":
                doc["roleRef"]["name"] += f"-{_RUN}"
            out.append(doc)
    assert sorted(d["kind"] for d in out) == [
        "ClusterRole", "ClusterRoleBinding", "Namespace", "ServiceAccount"
    ]  # fmt: skip
    return out


def grant(kube: Kube, ns: str, name: str, rules: list[dict[str, Any]], subjects: list[Any]) -> None:
    kube.request(
        "POST",
        f"{RBAC_PATH}/namespaces/{ns}/roles",
        body={"metadata": {"name": name}, "rules": rules},
    )
    kube.request(
        "POST",
        f"{RBAC_PATH}/namespaces/{ns}/rolebindings",
        body={
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        },
    )


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def may(kube: Kube, ns: str, who: str, groups: list[str], verb: str, group: str, res: str) -> bool:
    review = kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": who,
                "groups": groups,
                "resourceAttributes": {
                    "namespace": ns, "verb": verb, "group": group, "resource": res
                },
            },
        },
    )  # fmt: skip
    return bool(review["status"].get("allowed"))


USERS: dict[str, list[str]] = {
    "alice": ["system:authenticated"],
    "bob": ["system:authenticated"],
    "carol": ["system:authenticated"],
    "dave": [TEAM_GROUP, "system:authenticated"],
    "paul": ["system:authenticated"],
}


@pytest.fixture(scope="module")
def env(
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, client.CustomObjectsApi]]]:
    kube = Kube(kube_api_client)
    applier = Applier(kube_api_client)
    for doc in webhook_docs():
        applier.apply(doc, dry_run=False)
    sa = f"system:serviceaccount:{SYSTEM_NS}:inference-cache-webhook"
    sa_groups = ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NS}"]
    kubeconfig = control_plane.write_kubeconfig(
        Path(tmp_path_factory.mktemp("authz")) / "webhook",
        control_plane.client_keypair(sa, sa_groups),
    )
    wait_until(
        lambda: may(
            kube, "", sa, sa_groups, "create", "authorization.k8s.io", "subjectaccessreviews"
        ),
        timeout=30,
        description="the webhook's RBAC",
    )
    ns = labelled_namespace(kube_api_client, f"authz-{_RUN}", SUFFIX)
    cb_rules = [{"apiGroups": [GROUP], "resources": [PLURAL],
                 "verbs": ["create", "get", "list", "update", "patch"]}]  # fmt: skip
    grant(kube, ns, "cb-writers", cb_rules, [user(u) for u in USERS])
    deploy = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]},
              {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]  # fmt: skip
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    grant(kube, ns, "pod-creators", pods, [user("paul")])
    grant(kube, ns, "deployers", deploy,
          [user("bob"), user("carol"),
           {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": TEAM_GROUP}])  # fmt: skip
    sts = [{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["create"]}]
    grant(kube, ns, "sts-deployers", sts, [user("carol")])
    wait_until(
        lambda: (
            all(may(kube, ns, u, g, "create", GROUP, PLURAL) for u, g in USERS.items())
            and may(kube, ns, "dave", USERS["dave"], "create", "apps", "deployments")
            and may(kube, ns, "carol", USERS["carol"], "create", "apps", "statefulsets")
            and may(kube, ns, "dave", USERS["dave"], "create", "", "pods")
            and may(kube, ns, "paul", USERS["paul"], "create", "", "pods")
        ),
        timeout=30,
        description="the test users' RBAC",
    )
    clients = {u: control_plane.api_client_for(u, g) for u, g in USERS.items()}
    try:
        with run_webhook(kubeconfig) as hook, registered(kube_api_client, hook, SUFFIX):
            admin = client.CustomObjectsApi(kube_api_client)

            def webhook_answers() -> bool:
                bad = new_cb("probe", remoteStorage={**MANAGED, "ownership": "External"})
                try:
                    admin.create_namespaced_custom_object(
                        GROUP, VERSION, ns, PLURAL, bad, dry_run="All"
                    )
                except ApiException as exc:
                    return exc.status == 422 and "spec.remoteStorage.endpoint" in (exc.body or "")
                return False

            wait_until(webhook_answers, timeout=30, description="API server calling the webhook")
            yield ns, {u: client.CustomObjectsApi(api) for u, api in clients.items()}
    finally:
        for api in clients.values():
            api.close()


def create(env: Any, who: str, body: dict[str, Any]) -> dict[str, Any]:
    ns, apis = env
    result: dict[str, Any] = apis[who].create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, body
    )
    return result


def refused(env: Any, who: str, body: dict[str, Any], *, update: bool = False) -> ApiException:
    ns, apis = env
    api, name = apis[who], body["metadata"]["name"]
    call = (
        partial(api.replace_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name, body)
        if update
        else partial(api.create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body)
    )
    with pytest.raises(ApiException) as err:
        call()
    return err.value


def test_a_user_who_may_not_create_deployments_cannot_create_a_managed_backend(env: Any) -> None:
    err = refused(env, "alice", new_cb("alice-managed", remoteStorage=MANAGED))
    assert err.status == 403
    body = err.body or ""
    assert "spec.remoteStorage" in body
    assert 'user \\"alice\\" cannot create deployments.apps' in body
    # The same template knobs an attacker would use: still the same answer.
    err = refused(
        env,
        "alice",
        new_cb("alice-sa", remoteStorage=MANAGED,
                template={"serviceAccountName": "default", "tolerations": [{"operator": "Exists"}]}),
    )  # fmt: skip
    assert err.status == 403
    assert "spec.template" in (err.body or "")


def test_a_backend_that_shapes_no_workload_still_needs_create_pods(env: Any) -> None:
    """Rule "Engine-shaping needs engine-level permission": any backend shapes the
    engine pods it selects."""
    err = refused(env, "alice", new_cb("alice-host-only", {"app": "vllm"}))
    assert err.status == 403
    body = err.body or ""
    assert 'user \\"alice\\" cannot create pods in namespace' in body
    assert "spec.engineSelector" in body
    created = create(env, "paul", new_cb("paul-host-only", {"app": "vllm"}))
    assert created["metadata"]["name"] == "paul-host-only"


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("spec.lmCache.workerImage", {"lmCache": {"workerImage": "attacker.example/w:1"}}),
        (
            "spec.integration.engineOverrides",
            {"integration": {"engineOverrides": {"env": [{"name": "STOLEN", "valueFrom": {
                "secretKeyRef": {"name": "their-secret", "key": "token"}}}]}}},
        ),
        (
            "spec.integration.engineOverrides",
            {"integration": {"engineOverrides": {"args": ["--enable-prefix-caching"]}}},
        ),
        ("spec.engineSelector", {"engineSelector": {"matchLabels": {"app": "their-gpus"}}}),
        ("spec.lmCache.workerImage", {"lmCache": {"workerImage": "attacker.example/w:2"}}),
    ],
)  # fmt: skip
def test_engine_shaping_updates_need_create_pods(
    env: Any, field: str, change: dict[str, Any]
) -> None:
    """Impersonated users on the real API server: alice (no create pods) is refused with
    a 403 naming the permission and the field; paul (create pods) may; a label or an
    annotation needs nothing."""
    ns, apis = env
    name = f"eng-{uuid.uuid4().hex[:6]}"
    create(env, "paul", new_cb(name, {"app": "vllm"}))
    current = apis["alice"].get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    labelled = copy.deepcopy(current)
    labelled["metadata"].setdefault("labels", {})["team"] = "a"
    labelled["metadata"].setdefault("annotations", {})["note"] = "b"
    current = apis["alice"].replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name, labelled
    )
    shaped = copy.deepcopy(current)
    for key, value in change.items():
        shaped["spec"][key] = (
            {**shaped["spec"].get(key, {}), **value} if key == "lmCache" else value
        )
    err = refused(env, "alice", shaped, update=True)
    assert err.status == 403
    assert "cannot create pods" in (err.body or "")
    assert field in (err.body or "")
    apis["paul"].replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, shaped)


def test_a_user_who_may_create_deployments_is_allowed(env: Any) -> None:
    created = create(env, "bob", new_cb("bob-managed", remoteStorage=MANAGED))
    assert created["spec"]["remoteStorage"]["ownership"] == "Managed"
    # Granted through a group only: the review forwards the request's groups.
    create(env, "dave", new_cb("dave-managed", remoteStorage=MANAGED))


def test_a_statefulset_backend_also_needs_create_statefulsets(env: Any) -> None:
    sts = new_cb("sts", remoteStorage=MANAGED, deploymentKind="StatefulSet")
    err = refused(env, "bob", sts)
    assert err.status == 403
    assert "statefulsets.apps" in (err.body or "")
    assert "spec.deploymentKind" in (err.body or "")
    create(env, "carol", sts)


def test_system_masters_is_allowed_by_every_review_so_the_webhook_asks_none(
    env: Any, kube_api_client: client.ApiClient, control_plane: ControlPlane
) -> None:
    """Rule authorized_by_privileged_group: the webhook skips the SubjectAccessReview for a
    member of system:masters because the API server answers every such review "allowed".
    Checked here on the real API server for a user bound to nothing at all."""
    ns, _ = env
    kube = Kube(kube_api_client)
    nobody = f"root-{_RUN}"
    for group, resource in (("apps", "deployments"), ("apps", "statefulsets"), ("", "pods")):
        assert may(kube, ns, nobody, ["system:masters"], "create", group, resource)
        assert not may(kube, ns, nobody, ["system:authenticated"], "create", group, resource)
    sts = new_cb("masters-sts", remoteStorage=MANAGED, deploymentKind="StatefulSet")
    with control_plane.api_client_for(nobody, ["system:masters", "system:authenticated"]) as api:
        objects: Any = client.CustomObjectsApi(api)  # its methods return bare objects
        created = objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sts)
    assert created["spec"]["deploymentKind"] == "StatefulSet"


def test_updates_are_checked_only_when_they_reshape_the_workload(env: Any) -> None:
    ns, apis = env
    create(env, "bob", new_cb("shared", remoteStorage=MANAGED))
    current = apis["alice"].get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "shared")
    # alice may scale it or annotate it ...
    scaled = copy.deepcopy(current)
    scaled["spec"]["replicas"] = 2
    scaled["metadata"].setdefault("annotations", {})["team"] = "a"
    current = apis["alice"].replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "shared", scaled
    )
    assert current["spec"]["replicas"] == 2
    # ... but not choose what its pods run as.
    escalate = copy.deepcopy(current)
    escalate["spec"]["template"] = {"serviceAccountName": "powerful",
                                    "securityContext": {"runAsUser": 0}}  # fmt: skip
    err = refused(env, "alice", escalate, update=True)
    assert err.status == 403
    assert "spec.template" in (err.body or "")
    # bob may.
    apis["bob"].replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "shared", escalate)


def test_embedded_mode_runs_no_review_and_says_so(tmp_path: Path) -> None:
    """--backends-from: no API server to ask; a managed backend from a user nobody can
    vouch for is admitted on validation alone, and the log says the check is off."""
    port = free_port()
    log_path = tmp_path / "webhook.log"
    proc = spawn_in_own_group(
        [sys.executable, "-m", "icache_cli.main", "webhook", "--insecure", "--host", "127.0.0.1",
         "--port", str(port), "--backends-from", str(tmp_path)],
        log_path,
        ROOT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200,
            timeout=30,
            description="icache webhook --insecure --backends-from",
        )
        review = json.loads(
            (ROOT / "examples" / "admission" / "create-vllm-lmcacheserver-managed.json").read_text()
        )
        review["request"]["userInfo"] = {"username": "alice"}
        body = httpx.post(
            f"{url}/validate-inferencecache-io-v1alpha1-cachebackend", json=review, timeout=5
        ).json()
        assert body["response"]["allowed"] is True
        assert "no SubjectAccessReview" in log_path.read_text()
    finally:
        terminate_process_group(proc)


# ------------------------------------------- changes that open a tier or move its data

CONSENT = "inferencecache.io/allowed-consumer-namespaces"
SKIP_POLICY = "inferencecache.io/skip-network-policy"
EXTERNAL_LM = {"provider": "LMCacheServer", "ownership": "External",
               "endpoint": "lm://cache.example.com:65432"}  # fmt: skip


def _annotate(obj: dict[str, Any], **annotations: str) -> None:
    obj["metadata"].setdefault("annotations", {}).update(annotations)


def _widen_consent(obj: dict[str, Any]) -> None:
    _annotate(obj, **{CONSENT: "team-b,alices-own"})


def _drop_isolation(obj: dict[str, Any]) -> None:
    _annotate(obj, **{SKIP_POLICY: "true"})


def _to_external(obj: dict[str, Any]) -> None:
    obj["spec"]["remoteStorage"] = {**EXTERNAL_LM, "endpoint": "lm://alice.example.net:65432"}


def _move_endpoint(obj: dict[str, Any]) -> None:
    obj["spec"]["remoteStorage"]["endpoint"] = "lm://alice.example.net:65432"


def _cross(obj: dict[str, Any]) -> None:
    obj["spec"]["allowCrossNamespace"] = True


def _owner(name: str) -> dict[str, Any]:
    """A managed LMCacheServer tier (no password behind its NetworkPolicy) that admits
    team-b's engines."""
    body = new_cb(name, {"app": "vllm"}, remoteStorage=MANAGED)
    body["metadata"]["annotations"] = {CONSENT: "team-b", SKIP_POLICY: "false"}
    return body


@pytest.mark.parametrize(
    ("field", "base", "change"),
    [
        (f"metadata.annotations[{CONSENT}]", "owner", _widen_consent),
        (f"metadata.annotations[{SKIP_POLICY}]", "owner", _drop_isolation),
        ("spec.remoteStorage.ownership", "owner", _to_external),
        ("spec.remoteStorage.endpoint", "external", _move_endpoint),
        ("spec.allowCrossNamespace", "external", _cross),
    ],
)
def test_changes_that_open_a_tier_or_move_its_data_need_create_pods(
    env: Any, field: str, base: str, change: Any
) -> None:
    """The one rule for what needs ``create pods``, through the real API server: alice
    (who may update CacheBackends but not create pods) is refused each change with a
    403 naming the field; a label edit stays free for her; paul (who may also create
    pods) makes the same change."""
    ns, apis = env
    name = f"open-{uuid.uuid4().hex[:6]}"
    if base == "owner":
        create(env, "bob", _owner(name))
    else:
        create(env, "paul", new_cb(name, {"app": "vllm"}, remoteStorage=EXTERNAL_LM))
    current = apis["alice"].get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    labelled = copy.deepcopy(current)
    labelled["metadata"].setdefault("labels", {})["team"] = "a"
    current = apis["alice"].replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name, labelled
    )
    assert current["metadata"]["labels"]["team"] == "a"
    changed = copy.deepcopy(current)
    change(changed)
    err = refused(env, "alice", changed, update=True)
    assert err.status == 403
    assert 'user \\"alice\\" cannot create pods' in (err.body or "")
    assert field in (err.body or "")
    stored = apis["paul"].replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name, changed
    )
    assert stored["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]


def test_narrowing_consent_and_restoring_isolation_stay_free(env: Any) -> None:
    """Controls: what closes a tier needs nothing alice lacks."""
    ns, apis = env
    name = f"narrow-{uuid.uuid4().hex[:6]}"
    body = _owner(name)
    body["metadata"]["annotations"] = {CONSENT: "team-b,team-c", SKIP_POLICY: "true"}
    create(env, "bob", body)
    current = apis["alice"].get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    _annotate(current, **{CONSENT: "team-b", SKIP_POLICY: "false"})
    current = apis["alice"].replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name, current
    )
    del current["metadata"]["annotations"][CONSENT]
    stored = apis["alice"].replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name, current
    )
    assert stored["metadata"]["annotations"] == {SKIP_POLICY: "false"}


def _engine_pod(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "engine-", "labels": labels},
        "spec": {
            "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": ["--model", "m"]}
            ]
        },
    }


def test_a_status_writer_cannot_move_where_engines_send_their_data(
    env: Any, kube_api_client: client.ApiClient, control_plane: ControlPlane
) -> None:
    """Rule "Managed endpoints come from what we own", through the real Pod webhook: sam
    may only write cachebackends/status. He points status.endpoint elsewhere; the three
    engine pods created right after are all wired to the tier's own Service."""
    ns, _ = env
    kube = Kube(kube_api_client)
    name = f"tier-{uuid.uuid4().hex[:6]}"
    labels = {"app": name}
    admin = client.CustomObjectsApi(kube_api_client)
    admin.create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, new_cb(name, labels, remoteStorage=MANAGED)
    )
    ours = f"{name}-lmcache-server.{ns}.svc:65432"
    admin.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, name, {"status": {"endpoint": ours}}
    )
    sam = f"sam-{_RUN}"
    status_rules = [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get"]},
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"],
         "verbs": ["get", "update", "patch"]},
    ]  # fmt: skip
    grant(kube, ns, f"status-writers-{name}", status_rules, [user(sam)])
    wait_until(
        lambda: may(kube, ns, sam, ["system:authenticated"], "patch", GROUP, f"{PLURAL}/status"),
        timeout=30,
        description="the status writer's RBAC",
    )
    assert not may(kube, ns, sam, ["system:authenticated"], "update", GROUP, PLURAL)
    elsewhere = "lm://sam.attacker.example:65432"
    with control_plane.api_client_for(sam, ["system:authenticated"]) as api:
        objects: Any = client.CustomObjectsApi(api)
        moved = objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, name, {"status": {"endpoint": elsewhere}}
        )
    assert moved["status"]["endpoint"] == elsewhere
    core: Any = client.CoreV1Api(kube_api_client)
    remotes = []
    for _ in range(3):
        pod = core.create_namespaced_pod(ns, _engine_pod(labels), dry_run="All")
        assert (pod.metadata.annotations or {}).get("inferencecache.io/injected-by") == (
            f"{ns}/{name}"
        )
        env_vars = {e.name: e.value for e in pod.spec.containers[0].env or []}
        remotes.append(env_vars.get("LMCACHE_REMOTE_URL"))
    assert remotes == [f"lm://{ours}"] * 3
