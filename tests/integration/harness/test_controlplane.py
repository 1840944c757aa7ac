"""The test harness itself: a real kube-apiserver + etcd (and Redis) that behave
like a cluster's. Everything else in tests/integration builds on these."""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.harness.controlplane import (
    ADMIN_USER,
    SERVICE_ACCOUNT_CONTROLLER_USER,
    WRITE_VERBS,
    ControlPlane,
    ControlPlaneError,
    wait_until,
)
from tests.harness.redis_server import RedisServer

TEST_GROUP = "harness.icache.test"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_namespace(api: client.ApiClient) -> str:
    name = unique("harness")
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    return name


def test_version_is_a_recent_release(control_plane: ControlPlane) -> None:
    status, body = control_plane.get("/version")
    assert status == 200
    version = json.loads(body)
    assert version["major"] == "1"
    assert int(version["minor"]) >= 33
    assert version["gitVersion"].startswith(f"v1.{version['minor']}.")


def test_readyz_reports_every_check_ok(control_plane: ControlPlane) -> None:
    status, body = control_plane.get("/readyz?verbose")
    assert status == 200, body.decode()
    assert b"readyz check passed" in body


def test_namespace_is_created_and_read_back(kube_api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    name = unique("harness")
    created: Any = core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    read: Any = core.read_namespace(name)
    assert read.metadata.uid == created.metadata.uid
    assert read.status.phase == "Active"
    namespaces: Any = core.list_namespace()
    assert name in {ns.metadata.name for ns in namespaces.items}


def test_pods_are_admitted_with_a_service_account(kube_api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    ns = make_namespace(kube_api_client)
    wait_until(
        lambda: core.read_namespaced_service_account("default", ns),
        timeout=10,
        description=f"ServiceAccount {ns}/default",
    )
    pod: Any = core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="engine"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        ),
    )
    assert pod.spec.service_account_name == "default"
    assert any(v.name.startswith("kube-api-access-") for v in pod.spec.volumes)
    # No kubelet: status is whatever the test writes.
    pod.status = client.V1PodStatus(phase="Running")
    updated: Any = core.replace_namespaced_pod_status("engine", ns, pod)
    assert updated.status.phase == "Running"


def test_custom_resource_definition_becomes_established(kube_api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(kube_api_client)
    plural = unique("widgets").replace("-", "")
    crd_name = f"{plural}.{TEST_GROUP}"
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "default": 3},
                },
            }
        },
    }
    crd_body: Any = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": TEST_GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd_body)
    try:

        def established() -> bool:
            crd: Any = ext.read_custom_resource_definition(crd_name)
            conditions = crd.status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        wait_until(established, timeout=30, description=f"CRD {crd_name} Established")

        ns = make_namespace(kube_api_client)
        custom = client.CustomObjectsApi(kube_api_client)
        body = {"apiVersion": f"{TEST_GROUP}/v1", "kind": "Widget", "metadata": {"name": "w"}}
        created: Any = custom.create_namespaced_custom_object(TEST_GROUP, "v1", ns, plural, body)
        assert created["spec"] == {"size": 3}, "the server applies schema defaults"
        with pytest.raises(client.ApiException) as rejected:
            custom.create_namespaced_custom_object(
                TEST_GROUP,
                "v1",
                ns,
                plural,
                {**body, "metadata": {"name": "bad"}, "spec": {"size": 0}},
            )
        assert rejected.value.status == 422
    finally:
        ext.delete_custom_resource_definition(crd_name)


def test_subject_access_review_follows_rbac(
    control_plane: ControlPlane, kube_api_client: client.ApiClient
) -> None:
    ns = make_namespace(kube_api_client)
    user = unique("alice")
    rbac = client.RbacAuthorizationV1Api(kube_api_client)
    rbac.create_namespaced_role(
        ns,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        ns,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
            ),
            subjects=[
                client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")
            ],
        ),
    )
    authz = client.AuthorizationV1Api(kube_api_client)

    def allowed(verb: str, namespace: str) -> bool:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=verb, resource="pods"
                ),
            )
        )
        answer: Any = authz.create_subject_access_review(review)
        return bool(answer.status.allowed)

    # The RBAC authorizer reads through an informer: the binding shows up shortly.
    wait_until(lambda: allowed("list", ns), timeout=10, description=f"{user} may list pods")
    assert not allowed("delete", ns)
    assert not allowed("list", "default")

    # The same decisions apply to requests made as that user.
    as_user = control_plane.api_client_for(user)
    try:
        core = client.CoreV1Api(as_user)
        assert core.list_namespaced_pod(ns).items == []
        with pytest.raises(client.ApiException) as forbidden:
            core.list_namespaced_pod("default")
        assert forbidden.value.status == 403
    finally:
        as_user.close()


def test_audit_log_counts_write_requests(
    control_plane: ControlPlane, kube_api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api_client)
    ns = make_namespace(kube_api_client)
    since = control_plane.audit_offset()

    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"), data={"a": "1"})
    )
    core.patch_namespaced_config_map("cm", ns, {"data": {"a": "2"}})
    core.read_namespaced_config_map("cm", ns)

    mine: dict[str, Any] = {"user": ADMIN_USER, "resource": "configmaps", "namespace": ns}
    events = control_plane.wait_for_audit_events(since, count=3, **mine)
    assert [(e.verb, e.name, e.code) for e in events] == [
        ("create", "cm", 201),
        ("patch", "cm", 200),
        ("get", "cm", 200),
    ]
    assert control_plane.count_writes(since, **mine) == 2
    assert control_plane.count_writes(since, verbs={"create"}, **mine) == 1
    # The harness's own ServiceAccount controller writes under its own name.
    # It runs on its own schedule, so wait for its write rather than reading once.
    sa_writes = control_plane.wait_for_audit_events(
        0,
        verbs=WRITE_VERBS,
        user=SERVICE_ACCOUNT_CONTROLLER_USER,
        resource="serviceaccounts",
        namespace=ns,
    )
    assert [e.name for e in sa_writes] == ["default"]


def test_audit_barrier_lets_a_single_read_see_earlier_requests(
    control_plane: ControlPlane, kube_api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api_client)
    ns = make_namespace(kube_api_client)
    since = control_plane.audit_offset()
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="before"))
    )
    control_plane.audit_barrier(since)
    # One read, no polling: the barrier already waited.
    writes = control_plane.write_events(since, user=ADMIN_USER, namespace=ns)
    assert [(e.verb, e.name) for e in writes] == [("create", "before")]


def test_stop_is_idempotent_and_leaves_nothing_behind() -> None:
    cp = ControlPlane(audit=False, service_account_admission=False)
    cp.start()
    work_dir, pids, port = cp.work_dir, cp.pids, int(cp.server_url.rsplit(":", 1)[1])
    assert cp.running
    assert work_dir.is_dir()
    assert set(pids) == {"etcd", "kube-apiserver"}

    cp.stop()
    cp.stop()

    assert not cp.running
    assert not work_dir.exists()
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass


def test_start_failure_reports_the_logs_and_cleans_up() -> None:
    cp = ControlPlane(audit=False, extra_apiserver_args=["--no-such-flag"])
    with pytest.raises(ControlPlaneError) as failed:
        cp.start()
    message = str(failed.value)
    assert "kube-apiserver exited with code" in message
    assert "unknown flag: --no-such-flag" in message, "the log tail is in the error"
    assert not cp.running
    assert cp.pids == {}
    cp.stop()
    assert cp.apiserver_log_path.is_file(), "logs are kept for a post-mortem"
    shutil.rmtree(cp.work_dir)


def test_redis_server_restarts_on_the_same_port() -> None:
    server = RedisServer()
    server.start()
    try:
        url = server.url
        conn = redis.Redis.from_url(url)
        conn.set("k", "v")
        server.restart()
        assert server.url == url
        assert conn.get("k") is None, "a non-persistent restart starts empty"

        server.restart(persistence=True)
        conn.set("k", "v")
        server.restart(kill=True)
        assert conn.get("k") == b"v", "a persistent server keeps data across a crash"
        conn.close()
    finally:
        server.stop()
        server.stop()


def test_redis_server_fixture_answers(redis_server: RedisServer) -> None:
    conn = redis.Redis.from_url(redis_server.url)
    try:
        assert conn.ping()
    finally:
        conn.close()
