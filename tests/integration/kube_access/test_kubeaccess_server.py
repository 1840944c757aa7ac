"""On the real API server: every source of the one kubeconfig fallback order
connects, and every process's loader reaches the server through it.

- ``kubeio.access``: --kubeconfig, in-cluster (a real ServiceAccount token from
  the TokenRequest API and the server's CA, the way a pod mounts them), KUBECONFIG
  and ~/.kube/config each authenticate as whom they say.
- The processes, configured by KUBECONFIG alone (no flag, not in a pod, an empty
  home): `icache webhook` lists CacheBackends and makes its SubjectAccessReview,
  `icache certs` writes its Secrets, the worker's reconciler and the dispatcher's
  client list CacheBackends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from kubernetes import client

from kubeio import access as kubeaccess
from kubeio.client import CACHEBACKENDS, SECRETS, Kube, KubeClient, Resource
from reconciler.dispatch import dispatcher_cli
from reconciler.work import worker_runtime
from tests.harness.controlplane import (
    ControlPlane,
    free_port,
    tail,
    terminate_process_group,
    wait_until,
)
from tests.samples import ROOT
from tests.webhook_process import spawn_webhook

ICACHE = str(Path(sys.executable).parent / "icache")
EXAMPLES = ROOT / "examples" / "admission"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def whoami(kube: Kube) -> str:
    review = kube.request(
        "POST",
        SELF_SUBJECT_REVIEWS,
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


@pytest.fixture
def only_kubeconfig_env(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """KUBECONFIG names the admin kubeconfig; nothing else is configured."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    path = control_plane.write_kubeconfig(tmp_path / "admin.kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def test_the_flag_connects(control_plane: ControlPlane, tmp_path: Path) -> None:
    path = control_plane.write_kubeconfig(tmp_path / "flag.kubeconfig")
    assert whoami(kubeaccess.connect(str(path))) == "icache-admin"


def test_kubeconfig_env_connects(only_kubeconfig_env: Path) -> None:
    assert whoami(kubeaccess.connect()) == "icache-admin"


def test_home_kubeconfig_connects(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    control_plane.write_kubeconfig(tmp_path / ".kube" / "config")
    assert whoami(kubeaccess.connect()) == "icache-admin"


def test_in_cluster_connects_as_the_service_account_ahead_of_kubeconfig(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    only_kubeconfig_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod's mount: token and ca.crt, KUBERNETES_SERVICE_HOST/PORT. KUBECONFIG is
    set too (to the admin): the ServiceAccount must win."""
    kube.create(SERVICE_ACCOUNTS, namespace, {"metadata": {"name": "probe"}})
    token = kube.request(
        "POST",
        SERVICE_ACCOUNTS.item(namespace, "probe") + "/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )["status"]["token"]
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_bytes(control_plane.ca_pem)
    server = urlsplit(control_plane.server_url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))

    loaded = kubeaccess.load_configuration(serviceaccount_dir=sa)
    assert loaded.source == "in-cluster ServiceAccount"
    kube = Kube(client.ApiClient(loaded.configuration))
    assert whoami(kube) == f"system:serviceaccount:{namespace}:probe"


# ------------------------------------------------------------------ the processes


def _lists_cachebackends(kube: KubeClient, namespace: str) -> None:
    assert kube.list(CACHEBACKENDS, namespace)["items"] == []


def test_the_worker_reconciler_connects_through_kubeconfig_env(
    only_kubeconfig_env: Path,
    cachebackend_crd: dict[str, Any],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """worker_runtime.runtime() builds the reconcile client from WorkerConfig.kubeconfig,
    which `icache worker` leaves None without --kubeconfig. Redis is not touched."""
    monkeypatch.setattr(worker_runtime, "_config", None)
    monkeypatch.setattr(worker_runtime, "_runtime", None)
    worker_runtime.configure(
        worker_runtime.WorkerConfig(kubeconfig=None, redis_url="redis://127.0.0.1:1/0")
    )
    runtime = worker_runtime.runtime()
    try:
        _lists_cachebackends(runtime.reconciler.kube, namespace)
    finally:
        if runtime.cache is not None:  # its watches would outlive the test
            runtime.cache.stop()


def test_the_dispatcher_connects_through_kubeconfig_env(
    only_kubeconfig_env: Path, cachebackend_crd: dict[str, Any], namespace: str
) -> None:
    """`icache dispatcher` without --kubeconfig: the flag stays unset (KUBECONFIG is
    not its default) and the shared loader finds the env."""
    import argparse

    parser = argparse.ArgumentParser()
    dispatcher_cli.add_arguments(parser)
    args = parser.parse_args([])
    assert args.kubeconfig is None
    _lists_cachebackends(kubeaccess.connect(args.kubeconfig), namespace)


def test_icache_certs_connects_through_kubeconfig_env(
    only_kubeconfig_env: Path, kube: Kube, namespace: str
) -> None:
    result = subprocess.run(
        [
            ICACHE,
            "certs",
            f"--namespace={namespace}",
            "--mutating-config=",
            "--validating-config=",
            "--redis-secret=",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    secret = kube.get(SECRETS, namespace, "inference-cache-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"


@pytest.fixture
def webhook_from_env(only_kubeconfig_env: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`icache webhook --insecure` in live mode, configured by KUBECONFIG alone."""
    port = free_port()
    log_path = tmp_path / "webhook.log"
    proc = spawn_webhook(["--insecure", "--host", "127.0.0.1", "--port", str(port)], log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200,
            timeout=60,
            description="icache webhook --insecure (live API)",
            abort=lambda: tail(log_path) if proc.poll() is not None else None,
        )
        yield url, log_path
    finally:
        terminate_process_group(proc)


def test_the_webhook_lists_backends_and_reviews_access_through_kubeconfig_env(
    webhook_from_env: tuple[str, Path], cachebackend_crd: dict[str, Any]
) -> None:
    url, log_path = webhook_from_env
    pod = json.loads((EXAMPLES / "pod-no-match-fail-open.json").read_text())
    answer = httpx.post(f"{url}/mutate--v1-pod", json=pod, timeout=30).json()["response"]
    # no_match: the CacheBackend list succeeded (a failed one answers list_error).
    assert answer["auditAnnotations"]["reason"] == "no_match", answer

    managed = json.loads((EXAMPLES / "create-vllm-lmcacheserver-managed.json").read_text())
    answer = httpx.post(
        f"{url}/validate-inferencecache-io-v1alpha1-cachebackend", json=managed, timeout=30
    ).json()["response"]
    # The SubjectAccessReview answered (system:masters may create Deployments); an
    # unreachable one denies with 503 "could not verify".
    assert answer["allowed"] is True, answer

    records = [json.loads(line) for line in log_path.read_text().splitlines() if line]
    loaded = [r for r in records if r.get("msg") == "kubernetes configuration loaded"]
    assert loaded, tail(log_path)
    assert all(r["source"].startswith("KUBECONFIG=") for r in loaded)
