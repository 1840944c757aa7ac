"""End-to-end fixtures: the CRD and RBAC installed in the real control plane, and a
"stack" of real `icache dispatcher` / `icache worker` subprocesses on real Redis.

Two control planes serve the suite. By default a test gets the bare one (no
controllers: workload and pod status stay what the test writes, envtest style).
A test marked ``real_controllers`` gets the one with kube-controller-manager,
kube-scheduler and kwok, where Deployments and StatefulSets roll out for real
(tests/e2e/workloads.py has the helpers); such a test never writes workload status.

The processes run as the ServiceAccounts of manifests/rbac (client certificates
for `system:serviceaccount:<INSTALL_NAMESPACE>:icache-{worker,dispatcher}`), so every e2e
test also proves the RBAC is sufficient. Periods are shortened by flags so the
tests converge in seconds.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy
import pytest
import redis
import yaml

from kubeio import client as k
from reconciler.queue.workqueue import QueueSettings, WorkQueue
from shared.constants import INSTALL_NAMESPACE
from tests.harness.controlplane import ControlPlane
from tests.harness.polling import poll
from tests.harness.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "manifests" / "crd" / "inferencecache.io_cachebackends.yaml"
RBAC_DIR = REPO / "manifests" / "rbac"
SYSTEM_NAMESPACE = INSTALL_NAMESPACE
WORKER_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:icache-worker"
DISPATCHER_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:icache-dispatcher"
SA_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}")


def _create_ignoring_conflict(kube: k.Kube, path: str, body: dict[str, Any]) -> None:
    try:
        kube.request("POST", path, body=body)
    except k.ApiError as exc:
        if exc.status != 409:
            raise


_RBAC_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


@dataclass
class Cluster:
    cp: ControlPlane
    kube: k.Kube
    worker_kubeconfig: Path
    dispatcher_kubeconfig: Path
    namespaces: list[str] = field(default_factory=list)
    # Fake nodes a test added (tests/e2e/workloads.py open_pool); removed after it.
    nodes: list[str] = field(default_factory=list)

    @property
    def controllers(self) -> bool:
        """kube-controller-manager, kube-scheduler and kwok run on this control plane."""
        return self.cp.controllers

    def cleanup(self, namespaces: list[str]) -> None:
        """After a test: delete its CacheBackends, and with controllers its namespaces
        too (the namespace controller and the garbage collector empty them)."""
        self.delete_backends(namespaces)
        if not self.controllers:
            return
        paths = [f"/api/v1/namespaces/{ns}" for ns in namespaces]
        paths += [f"/api/v1/nodes/{node}" for node in self.nodes]
        self.nodes.clear()
        for path in paths:
            try:
                self.kube.request("DELETE", path)
            except k.ApiError as exc:
                if not exc.not_found:
                    raise

    def namespace(self, labels: dict[str, str] | None = None) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        meta: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
        self.kube.request("POST", "/api/v1/namespaces", body={"metadata": meta})
        self.namespaces.append(name)
        return name

    def delete_backends(self, namespaces: list[str]) -> None:
        """Delete the CacheBackends a finished test left behind, so the stacks of later
        tests (which reconcile every backend of the shared control plane) neither spend
        the machine's CPU on them nor see their state change mid-test. There is no
        namespace controller to empty a deleted namespace, so they go one by one; their
        owned objects stay (no garbage collector) and reconcile to nothing."""
        for ns in namespaces:
            for cb in self.kube.list(k.CACHEBACKENDS, ns).get("items") or []:
                self.kube.delete(k.CACHEBACKENDS, ns, cb["metadata"]["name"])

    # ---- CacheBackends

    def create_cb(
        self,
        ns: str,
        name: str,
        spec: dict[str, Any],
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if annotations:
            meta["annotations"] = annotations
        return self.kube.create(
            k.CACHEBACKENDS,
            ns,
            {
                "apiVersion": "inferencecache.io/v1alpha1",
                "kind": "CacheBackend",
                "metadata": meta,
                "spec": spec,
            },
        )

    def cb(self, ns: str, name: str) -> dict[str, Any]:
        return self.kube.get(k.CACHEBACKENDS, ns, name)

    def patch_cb(
        self, ns: str, name: str, patch: dict[str, Any], *, status: bool = False
    ) -> dict[str, Any]:
        path = k.CACHEBACKENDS.item(ns, name) + ("/status" if status else "")
        return self.kube.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )

    def wait_cb(
        self,
        ns: str,
        name: str,
        check: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            obj = self.cb(ns, name)
            return obj if check(obj) else None

        return poll(ok, timeout=timeout, what=f"{ns}/{name}: {what}")

    def wait_condition(
        self, ns: str, name: str, type_: str, status: str, reason: str, timeout: float = 30.0
    ) -> dict[str, Any]:
        return self.wait_cb(
            ns,
            name,
            lambda o: condition(o, type_) == (status, reason),
            f"{type_}={status}/{reason}",
            timeout,
        )

    def events(self, ns: str, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        """The Events about object ``name``; with ``reason``, only those."""
        items = self.kube.list(k.EVENTS, ns).get("items") or []
        return [
            e
            for e in items
            if (e.get("involvedObject") or {}).get("name") == name
            and (reason is None or e.get("reason") == reason)
        ]


# ---- engine and cache-server pods (wired by annotations, as the Pod webhook leaves them)

KERNEL_CHECK = "lmcache-kernel-check"


#: A scheduler nobody runs: a pod naming it stays unbound, so no kwok node writes its
#: status and the test can (the pod plays one a kubelet reported on).
HAND_WRITTEN_STATUS_SCHEDULER = "harness-hand-written-status"


def create_pod(
    cluster: Cluster,
    ns: str,
    name: str,
    annotations: dict[str, str],
    *,
    labels: dict[str, str] | None = None,
    containers: tuple[str, ...] = ("vllm",),
    kernel_check: bool = False,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": n, "image": "engine:1"} for n in containers]}
    if cluster.controllers:
        spec["schedulerName"] = HAND_WRITTEN_STATUS_SCHEDULER
    if kernel_check:
        spec["initContainers"] = [{"name": KERNEL_CHECK, "image": "engine:1"}]
    meta: dict[str, Any] = {
        "name": name,
        "labels": labels or {"app": "vllm"},
        "annotations": annotations,
    }
    if owner:
        meta["ownerReferences"] = [owner]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    # The harness creates each namespace's default ServiceAccount shortly after.
    return poll(lambda: cluster.kube.create(k.PODS, ns, body), timeout=30, what=f"pod {name}")


def set_pod_status(cluster: Cluster, ns: str, name: str, status: dict[str, Any]) -> None:
    cluster.kube.request(
        "PATCH",
        k.PODS.item(ns, name) + "/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )


def injected(cb: dict[str, Any], mode: str | None = None) -> dict[str, str]:
    meta = cb["metadata"]
    out = {
        "inferencecache.io/injected-by": f"{meta['namespace']}/{meta['name']}",
        "inferencecache.io/injected-by-uid": meta["uid"],
    }
    if mode:
        out["inferencecache.io/lmcache-kernel-check-mode"] = mode
    return out


def condition(obj: dict[str, Any], type_: str) -> tuple[str, str] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond.get("status"), cond.get("reason")
    return None


def condition_message(obj: dict[str, Any], type_: str) -> str:
    """The message of condition ``type_`` (the test has waited for it to be there)."""
    return next(
        str(cond.get("message") or "")
        for cond in (obj.get("status") or {}).get("conditions") or []
        if cond.get("type") == type_
    )


def converged(obj: dict[str, Any]) -> bool:
    """The controller has written status for the backend's current generation."""
    st = obj.get("status") or {}
    return st.get("observedGeneration") == obj["metadata"]["generation"]


def converged_with_endpoint(obj: dict[str, Any]) -> bool:
    """Converged, and the status publishes the endpoint (a managed tier is serving)."""
    return converged(obj) and bool((obj.get("status") or {}).get("endpoint"))


def scrape_metrics(port: int) -> str:
    """The Prometheus exposition a process serves on 127.0.0.1:``port``/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def matched(obj: dict[str, Any]) -> Any:
    return (obj.get("status") or {}).get("matchedEnginePods")


def selector_message(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("engineSelectorMessage") or "")


def engine_deployment_as_the_controller_leaves_it(
    cluster: Cluster, ns: str, name: str, app: str, replicas: int
) -> None:
    """An engine Deployment and the ReplicaSet the deployment controller would create
    for it (this control plane runs none): the template's labels plus
    pod-template-hash, a controller reference, the revision and desired-replicas
    annotations. No pod: nothing runs its ReplicaSet either."""
    template = {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
    }
    dep = cluster.kube.create(
        k.DEPLOYMENTS,
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                     "template": template},
        },
    )  # fmt: skip
    labels = {"app": app, "pod-template-hash": "h1"}
    cluster.kube.create(
        k.REPLICASETS,
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-h1",
                "labels": labels,
                "annotations": {
                    "deployment.kubernetes.io/revision": "1",
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                     "uid": dep["metadata"]["uid"], "controller": True}],
            },
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {**template, "metadata": {"labels": labels}}},
        },
    )  # fmt: skip


def install_cluster(control_plane: ControlPlane, kubeconfig_dir: Path) -> Cluster:
    """Install the CRD and RBAC in ``control_plane`` and write the worker's and the
    dispatcher's kubeconfigs (their ServiceAccount identities) to ``kubeconfig_dir``.
    Idempotent. Also used by benchmarks, outside pytest."""
    kube = k.Kube(control_plane.api_client())
    crd = yaml.safe_load(CRD_PATH.read_text())
    _create_ignoring_conflict(kube, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    _create_ignoring_conflict(kube, "/api/v1/namespaces", {"metadata": {"name": SYSTEM_NAMESPACE}})
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in _RBAC_PATHS:
                continue
            ns = (doc.get("metadata") or {}).get("namespace", SYSTEM_NAMESPACE)
            _create_ignoring_conflict(kube, _RBAC_PATHS[doc["kind"]].format(ns=ns), doc)
    poll(lambda: kube.list(k.CACHEBACKENDS) is not None, timeout=30, what="the CRD to be served")
    kubeconfig_dir.mkdir(parents=True, exist_ok=True)
    worker = control_plane.write_kubeconfig(
        kubeconfig_dir / "worker", control_plane.client_keypair(WORKER_USER, SA_GROUPS)
    )
    dispatcher = control_plane.write_kubeconfig(
        kubeconfig_dir / "dispatcher", control_plane.client_keypair(DISPATCHER_USER, SA_GROUPS)
    )
    return Cluster(control_plane, kube, worker, dispatcher)


@pytest.fixture(scope="session")
def bare_cluster(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    c = install_cluster(control_plane, tmp_path_factory.mktemp("kubeconfigs"))
    try:
        yield c
    finally:
        c.kube.close()


@pytest.fixture(scope="session")
def rollout_cluster(
    controller_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    c = install_cluster(controller_plane, tmp_path_factory.mktemp("kubeconfigs-controllers"))
    try:
        yield c
    finally:
        c.kube.close()


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """The bare control plane, or the one with controllers for a test marked
    ``real_controllers``."""
    if request.node.get_closest_marker("real_controllers") is not None:
        return request.getfixturevalue("rollout_cluster")
    return request.getfixturevalue("bare_cluster")


# --------------------------------------------------------------------- processes


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    # time.monotonic() when the test SIGKILLed it: its unfinished reconcile ends there.
    killed_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            os.killpg(self.popen.pid, sig)
            self.popen.wait(timeout=20)
            self.killed_at = time.monotonic()

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


_DB = itertools.count(1)


@dataclass
class Stack:
    """Dispatchers and workers sharing one Redis database and one Lease."""

    cluster: Cluster
    redis_server: RedisServer
    workdir: Path
    db: int
    resync_period: float = 2.0
    lease_seconds: float = 3.0
    dispatch_timeout: float = 5.0
    # The RBAC grants the dispatcher exactly this Lease; stacks run one at a time.
    lease_name: str = "inference-cache-dispatcher"
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    procs: list[Proc] = field(default_factory=list)

    @property
    def redis_url(self) -> str:
        return self.redis_server.url_for_db(self.db)

    def _spawn(self, name: str, args: list[str]) -> Proc:
        log_path = self.workdir / f"{name}.log"
        fh = log_path.open("ab")
        popen = subprocess.Popen(
            [sys.executable, "-m", "icache_cli.main", *args],
            cwd=REPO,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                # start/end of every reconcile, for concurrent_runs()
                "ICACHE_DEBUG_LOGGERS": "reconciler.trace",
            },
        )
        fh.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def start_worker(
        self, name: str = "worker", concurrency: int = 2, extra: list[str] | None = None
    ) -> Proc:
        return self._spawn(
            name,
            [
                "worker",
                "--kubeconfig", str(self.cluster.worker_kubeconfig),
                "--redis-url", self.redis_url,
                "--concurrency", str(concurrency),
                "--lease-seconds", str(self.lease_seconds),
                "--backoff-base", "0.2",
                "--backoff-max", "5",
                *(extra or []),
            ],
        )  # fmt: skip

    def identity(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def start_dispatcher(self, name: str = "dispatcher-a", extra: list[str] | None = None) -> Proc:
        identity = self.identity(name)
        return self._spawn(
            name,
            [
                "dispatcher",
                "--kubeconfig", str(self.cluster.dispatcher_kubeconfig),
                "--redis-url", self.redis_url,
                "--lease-namespace", SYSTEM_NAMESPACE,
                "--lease-name", self.lease_name,
                "--identity", identity,
                "--lease-duration", "3",
                "--renew-deadline", "2",
                "--retry-period", "0.5",
                "--resync-period", str(self.resync_period),
                "--dispatch-timeout", str(self.dispatch_timeout),
                "--lease-seconds", str(self.lease_seconds),
                "--backoff-base", "0.2",
                "--backoff-max", "5",
                *(extra or []),
            ],
        )  # fmt: skip

    def queue(self) -> WorkQueue:
        return WorkQueue(redis.Redis.from_url(self.redis_url), QueueSettings())

    def lease_holder(self) -> str:
        lease = self.cluster.kube.get_or_none(k.LEASES, SYSTEM_NAMESPACE, self.lease_name)
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} =====\n{p.log()[-6000:]}" for p in self.procs)

    def reconcile_runs(self) -> dict[str, list[Run]]:
        """Every reconcile any worker of this stack ran, by key, from the workers'
        reconciler.trace lines."""
        return reconcile_runs(self.procs)


@dataclass(frozen=True)
class Run:
    key: str
    token: str
    proc: str
    start: float
    end: float


def reconcile_runs(procs: list[Proc]) -> dict[str, list[Run]]:
    """Reconcile runs by key (start/end in time.monotonic(), which is system-wide on
    Linux, so runs of different processes compare). A run without an end belongs
    to a process that was killed (it ends at the kill) or is still running (it
    ends now)."""
    now = time.monotonic()
    runs: dict[str, list[Run]] = {}
    for proc in procs:
        open_: dict[str, tuple[str, float]] = {}
        for line in proc.log().splitlines():
            if '"reconciler.trace"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            token = str(rec.get("token"))
            if rec.get("msg") == "reconcile start":
                open_[token] = (str(rec.get("key")), float(rec["mono"]))
            elif rec.get("msg") == "reconcile end" and token in open_:
                key, start = open_.pop(token)
                runs.setdefault(key, []).append(
                    Run(key, token, proc.name, start, float(rec["mono"]))
                )
        end = proc.killed_at if proc.killed_at is not None else now
        for token, (key, start) in open_.items():
            runs.setdefault(key, []).append(Run(key, token, proc.name, start, end))
    return runs


def concurrent_runs(runs: dict[str, list[Run]]) -> list[tuple[Run, Run]]:
    """Pairs of runs of one key that overlapped in time (must be empty: the work
    queue never lets two workers process a key at once)."""
    overlaps = []
    for key_runs in runs.values():
        ordered = sorted(key_runs, key=lambda r: r.start)
        for prev, nxt in itertools.pairwise(ordered):
            if nxt.start < prev.end:
                overlaps.append((prev, nxt))
    return overlaps


@pytest.fixture
def stack(
    cluster: Cluster, redis_server: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    db = next(_DB) % 16 or 1
    redis.Redis.from_url(redis_server.url_for_db(db)).flushdb()
    s = Stack(cluster, redis_server, tmp_path, db)
    first_namespace = len(cluster.namespaces)
    try:
        yield s
    finally:
        s.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(s.logs())
        cluster.cleanup(cluster.namespaces[first_namespace:])


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
