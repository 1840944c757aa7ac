"""The harness with real controllers: kube-controller-manager and kube-scheduler of the
API server's own release, kwok's fake GPU and CPU nodes, and the stages tests trigger."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.builders import gpu_pod as _pod
from tests.harness import kwok
from tests.harness.controllers import ControllerBinaries
from tests.harness.controlplane import REPO_ROOT, ControlPlane, find_binaries, wait_until


@pytest.fixture(scope="module")
def api(controller_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api_client = controller_plane.api_client()
    try:
        yield api_client
    finally:
        api_client.close()


def ready_condition(obj: Any) -> str | None:
    for cond in obj.status.conditions or []:
        if cond.type == "Ready":
            return str(cond.status)
    return None


def test_controllers_are_the_api_servers_release(controller_plane: ControlPlane) -> None:
    """One Kubernetes module and version for kube-apiserver, kube-controller-manager
    and kube-scheduler (tests/controlplane/go.mod)."""
    status, body = controller_plane.get("/version")
    assert status == 200
    release = json.loads(body)["gitVersion"]
    binaries = ControllerBinaries.beside(find_binaries(build=False).kube_apiserver.parent)
    for binary in (binaries.kube_controller_manager, binaries.kube_scheduler):
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, check=True
        ).stdout
        assert out.split() == ["Kubernetes", release], out


def test_kwok_manages_gpu_and_cpu_nodes(api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert {n.name for n in kwok.DEFAULT_NODES} <= set(nodes)
    for fake in kwok.DEFAULT_NODES:
        node = nodes[fake.name]
        assert ready_condition(node) == "True"
        allocatable = node.status.allocatable or {}
        taints = {t.key for t in node.spec.taints or []}
        if fake.gpus:
            assert allocatable[kwok.GPU_RESOURCE] == str(fake.gpus)
            assert kwok.GPU_RESOURCE in taints
        else:
            assert kwok.GPU_RESOURCE not in allocatable
            assert kwok.GPU_RESOURCE not in taints


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    core: Any = client.CoreV1Api(api)
    name = f"harness-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_until(
        lambda: core.read_namespaced_service_account("default", name),
        timeout=30,
        description="the ServiceAccount controller",
    )
    yield name
    core.delete_namespace(name)


def _running_ready(core: Any, ns: str, name: str) -> Any:
    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        ready = pod.status.phase == "Running" and ready_condition(pod) == "True"
        return pod if ready else None

    return wait_until(check, timeout=60, description=f"pod {ns}/{name} Running and Ready")


def test_pods_are_scheduled_by_resources_and_run_on_kwok(
    api: client.ApiClient, namespace: str
) -> None:
    """A GPU pod tolerates the GPU taint (ExtendedResourceToleration) and lands on a
    GPU node; a CPU pod cannot; kwok reports both Running and Ready."""
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("gpu", gpus=1))
    core.create_namespaced_pod(namespace, _pod("cpu"))
    gpu_node = _running_ready(core, namespace, "gpu").spec.node_name
    cpu_node = _running_ready(core, namespace, "cpu").spec.node_name
    gpu_nodes = {n.name for n in kwok.DEFAULT_NODES if n.gpus}
    assert gpu_node in gpu_nodes
    assert cpu_node not in gpu_nodes


def test_kwok_stages_restart_fail_and_unready_a_pod(api: client.ApiClient, namespace: str) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("p"))
    pod = _running_ready(core, namespace, "p")
    uid = pod.metadata.uid

    def live() -> dict[str, Any]:
        data: dict[str, Any] = api.sanitize_for_serialization(
            core.read_namespaced_pod("p", namespace)
        )
        return data

    # Restart in place: same UID, restartCount + 1, lastState terminated.
    for want in (1, 2):
        core.patch_namespaced_pod("p", namespace, kwok.restart_patch(live(), ["main"]))
        wait_until(
            lambda want=want: kwok.restart_count(live(), "main") == want,  # type: ignore[misc]
            timeout=30,
            description=f"restartCount {want}",
        )
    status = live()["status"]["containerStatuses"][0]
    assert live()["metadata"]["uid"] == uid
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert "running" in status["state"]

    core.patch_namespaced_pod("p", namespace, kwok.readiness_patch(False))
    wait_until(lambda: ready_condition(core.read_namespaced_pod("p", namespace)) == "False",
               timeout=30, description="not Ready")  # fmt: skip
    assert core.read_namespaced_pod("p", namespace).status.phase == "Running"
    core.patch_namespaced_pod("p", namespace, kwok.readiness_patch(True))
    _running_ready(core, namespace, "p")

    core.patch_namespaced_pod("p", namespace, kwok.fail_patch())
    wait_until(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Failed",
               timeout=30, description="phase Failed")  # fmt: skip
    terminated = live()["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1


def test_a_deployment_rolls_out_and_its_namespace_is_emptied_on_delete(
    api: client.ApiClient,
) -> None:
    """The deployment, replicaset, garbage-collector and namespace controllers run."""
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    ns = f"harness-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": _pod("x")["spec"]},
        },
    }
    wait_until(lambda: apps.create_namespaced_deployment(ns, body), timeout=30,
               description="Deployment created")  # fmt: skip
    wait_until(
        lambda: (apps.read_namespaced_deployment("d", ns).status.available_replicas or 0) == 2,
        timeout=60,
        description="two available replicas",
    )
    assert len(core.list_namespaced_pod(ns).items) == 2
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_until(gone, timeout=90, description=f"namespace {ns} deleted")


def test_cluster_up_starts_the_controllers_and_down_stops_everything(tmp_path: Path) -> None:
    state_dir = tmp_path / "cluster"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.harness.cli", "--dir", str(state_dir), *args],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    up = cli("up")
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads((state_dir / "state.json").read_text())
        assert {"kube-controller-manager", "kube-scheduler", "kwok"} <= set(state["pids"])
        assert cli("status").returncode == 0
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert cli("status").returncode == 1
