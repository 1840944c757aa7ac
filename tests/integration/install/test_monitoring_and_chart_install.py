"""The monitoring bundle and the Helm chart on a real kube-apiserver.

The Prometheus Operator's own CRDs (pinned, from the Go module proxy) are installed,
so every ServiceMonitor and the PrometheusRule of overlays/monitoring and of the
chart must pass a server-side dry run against the operator's schemas (strict field
validation). Every object the chart renders with default, production-like and
cert-manager values passes the same dry run (cert-manager's kinds excepted: not
served here), and every pod it would run, the hook Jobs and the rotation CronJob's
included, is admitted under Pod Security "restricted".
"""

from __future__ import annotations

import copy
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_install.manifests_cli import render_manifests
from kubeio.client import ApiError, Kube
from tests.harness.controlplane import ControlPlane, wait_until
from tests.helm_chart import VALUE_SETS, template
from tests.integration.manifest_apply import Applier, kind_and_name
from tests.samples import ROOT

NAMESPACE = "inference-cache-system"
OPERATOR_CRDS = (
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
    "monitoring.coreos.com_podmonitors.yaml",
)
NOT_SERVED = {"Issuer", "Certificate"}


@pytest.fixture(scope="module")
def operator_crds(applier: Applier) -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "tools" / "prometheus-operator-crds.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    directory = Path(done.stdout.strip().splitlines()[-1])
    for name in OPERATOR_CRDS:
        applier.apply(yaml.safe_load((directory / name).read_text()), dry_run=False)
    for plural in ("servicemonitors", "prometheusrules", "podmonitors"):
        path = f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/{plural}"

        def served(path: str = path) -> object:
            return applier.kube.request("GET", path)

        wait_until(served, timeout=30, description=f"{plural} served")


@pytest.fixture(scope="module")
def install_namespace(applier: Applier, cachebackend_crd: dict[str, Any]) -> str:
    for doc in render_manifests():
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            applier.apply(doc, dry_run=False)
    wait_until(
        lambda: applier.kube.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
        ),
        timeout=30,
        description="the namespace's default ServiceAccount",
    )
    return NAMESPACE


MONITORING = [d for d in render_manifests("monitoring") if d not in render_manifests()]


def test_the_monitoring_variant_adds_the_bundle() -> None:
    assert sorted(kind_and_name(d) for d in MONITORING) == [
        "ConfigMap/inference-cache-dashboard",
        "PodMonitor/inference-cache-engines",
        "PrometheusRule/inference-cache",
        "ServiceMonitor/inference-cache-dispatcher",
        "ServiceMonitor/inference-cache-webhook",
        "ServiceMonitor/inference-cache-worker",
    ]


@pytest.mark.parametrize("doc", MONITORING, ids=kind_and_name)
def test_the_monitoring_bundle_passes_the_operators_schemas(
    applier: Applier, operator_crds: None, install_namespace: str, doc: dict[str, Any]
) -> None:
    applied = applier.apply(doc, dry_run=True)
    assert applied["spec" if doc["kind"] != "ConfigMap" else "data"]


def test_the_operator_schema_check_can_fail(
    applier: Applier, operator_crds: None, install_namespace: str
) -> None:
    """The control: a misspelt ServiceMonitor field is refused."""
    (monitor,) = [
        copy.deepcopy(d)
        for d in MONITORING
        if kind_and_name(d) == "ServiceMonitor/inference-cache-webhook"
    ]
    monitor["spec"]["endpoints"][0]["tlsConfig"]["insecureSkipVerfy"] = True
    with pytest.raises(ApiError) as refused:
        applier.apply(monitor, dry_run=True)
    assert "insecureSkipVerfy" in refused.value.body


def _pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner, pod metadata, pod spec) of every pod template."""
    out = []
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc["kind"] in ("Deployment", "Job"):
            template_ = spec["template"]
        elif doc["kind"] == "CronJob":
            template_ = spec["jobTemplate"]["spec"]["template"]
        else:
            continue
        out.append((kind_and_name(doc), template_.get("metadata") or {}, template_["spec"]))
    return out


@pytest.mark.parametrize("values", [None, "production", "cert-manager", "external-redis"])
def test_every_chart_object_applies_and_every_pod_is_admitted_restricted(
    applier: Applier,
    operator_crds: None,
    install_namespace: str,
    helm_bin: Path,
    tmp_path: Path,
    values: str | None,
) -> None:
    chosen = copy.deepcopy(VALUE_SETS[values]) if values else {}
    # Everything into the prepared install namespace (the production set names another).
    chosen.setdefault("namespace", {}).update(name=NAMESPACE, create=False)
    chosen.get("monitoring", {}).get("dashboard", {}).pop("namespace", None)
    docs = template(helm_bin, chosen, tmp_path)
    for doc in docs:
        if doc["kind"] in NOT_SERVED:
            continue
        applied = applier.apply(doc, dry_run=True)
        assert applied["metadata"]["name"] == doc["metadata"]["name"]
    # Pod admission looks the ServiceAccount up: the hooks' one exists for real here.
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            applier.apply(doc, dry_run=False)
    pods = _pod_specs(docs)
    assert any(owner.startswith(("Job/", "CronJob/")) for owner, _, _ in pods) == (
        values != "cert-manager"
    )
    for owner, meta, spec in pods:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{owner.split('/')[1]}-dry-run",
                "namespace": NAMESPACE,
                "labels": meta.get("labels") or {},
            },
            "spec": spec,
        }
        # The chart's priority class is not installed here: admission would refuse it
        # for that reason, not for Pod Security.
        pod["spec"] = {k: v for k, v in spec.items() if k != "priorityClassName"}
        applier.create(pod, dry_run=True)


# ---------------------------------------------------------------- helm itself

RELEASE = "ic-smoke"
RELEASE_NAMESPACE = "default"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/cachebackends.inferencecache.io"


@pytest.fixture(scope="module")
def helm_plane() -> Iterator[ControlPlane]:
    """A control plane of this module's own, with kube-controller-manager, the
    scheduler and kwok's fake nodes: the hook Jobs' pods are scheduled and complete
    (kwok completes Job pods without running their container, so `icache certs` does
    not really run and writes no Secret), and the CRD and webhook configurations the
    chart installs and uninstalls touch no other test's objects."""
    plane = ControlPlane(controllers=True)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


class Helm:
    """The pinned helm against ``plane``, with its own config, cache and data dirs."""

    def __init__(self, helm_bin: Path, plane: ControlPlane, home: Path) -> None:
        self.helm_bin = helm_bin
        self.env = {
            **os.environ,
            "KUBECONFIG": str(plane.kubeconfig_path),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.helm_bin), *args, "--namespace", RELEASE_NAMESPACE],
            capture_output=True,
            text=True,
            timeout=400,
            env=self.env,
            check=False,
        )
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


def _get(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _gone(kube: Kube, path: str) -> bool:
    return _get(kube, path) is None


def test_helm_installs_upgrades_rolls_back_and_uninstalls_on_a_real_api_server(
    helm_bin: Path, helm_plane: ControlPlane, tmp_path: Path
) -> None:
    """The chart's install lifecycle with real `helm` (self-signed certificates, so the
    hook Jobs run; namespace.create=true into a namespace that does not exist yet,
    the release stored in `default`). docs/install.md "Install with Helm":

    - install: the Namespace (with its Pod Security labels) exists before the
      certificate hooks, and the release's objects are created;
    - upgrade: a changed value lands; rollback: the earlier value is back;
    - uninstall: the release's objects go, the CRD and every CacheBackend stay
      (crds.keep, the default), and so does the Namespace; installing again under the
      same release name takes the kept CRD back, with the namespace already there.
    """
    kube = Kube(helm_plane.api_client())
    helm = Helm(helm_bin, helm_plane, tmp_path / "helm")
    ns = f"ic-helm-{uuid.uuid4().hex[:6]}"
    chart = str(ROOT / "charts" / "inference-cache")
    values = ["--set", f"namespace.name={ns}", "--set", "namespace.create=true"]
    worker = f"/apis/apps/v1/namespaces/{ns}/deployments/inference-cache-worker"
    release_objects = [
        f"/apis/apps/v1/namespaces/{ns}/deployments/inference-cache-webhook",
        f"/apis/apps/v1/namespaces/{ns}/deployments/inference-cache-dispatcher",
        worker,
        f"/api/v1/namespaces/{ns}/services/inference-cache-webhook",
        f"/api/v1/namespaces/{ns}/configmaps/inference-cache-config",
        f"/apis/batch/v1/namespaces/{ns}/cronjobs/inference-cache-cert-rotation",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/inference-cache-mutating",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/inference-cache-validating",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/inference-cache-webhook",
    ]
    hook_identity = f"/api/v1/namespaces/{ns}/serviceaccounts/inference-cache-certs"

    def replicas() -> int:
        deployment = _get(kube, worker)
        assert deployment is not None
        return int(deployment["spec"]["replicas"])

    def installed() -> None:
        namespace = _get(kube, f"/api/v1/namespaces/{ns}")
        assert namespace is not None
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        missing = [path for path in release_objects if _get(kube, path) is None]
        assert not missing, missing
        assert _get(kube, CRD) is not None
        # The hooks' identity is a hook deleted once the Jobs succeeded.
        wait_until(lambda: _gone(kube, hook_identity), timeout=60, description="hook RBAC gone")

    def uninstalled() -> None:
        helm("uninstall", RELEASE, "--wait", "--timeout", "3m")
        wait_until(
            lambda: not [path for path in release_objects if not _gone(kube, path)],
            timeout=60,
            description="the release's objects gone",
        )
        assert _get(kube, CRD) is not None, "crds.keep: the CRD stays"
        assert _get(kube, f"/api/v1/namespaces/{ns}") is not None, "the Namespace stays"

    helm("install", RELEASE, chart, *values, "--timeout", "4m")
    installed()
    assert replicas() == 2

    helm(
        "upgrade", RELEASE, chart, "--reuse-values", "--set", "worker.replicas=3", "--timeout", "4m"
    )
    assert replicas() == 3
    helm("rollback", RELEASE, "1", "--timeout", "4m")
    assert replicas() == 2
    revisions = [line.split()[0] for line in helm("history", RELEASE).splitlines()[1:]]
    assert revisions == ["1", "2", "3"]

    uninstalled()
    # Nothing calls the CacheBackend webhooks now (their configurations are gone): a
    # CacheBackend can be written, and survives the next install and uninstall.
    backends = f"/apis/inferencecache.io/v1alpha1/namespaces/{ns}/cachebackends"
    kube.request(
        "POST",
        backends,
        body={
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": {"name": "kept", "namespace": ns},
            "spec": {
                "runtime": "VLLM",
                "integration": {"mode": "EventsOnly"},
                "engineSelector": {"matchLabels": {"app": "vllm"}},
                "observation": {"modelID": "m"},
            },
        },
    )
    helm("install", RELEASE, chart, *values, "--timeout", "4m")  # the namespace exists now
    installed()
    assert _get(kube, f"{backends}/kept") is not None
    uninstalled()
    assert _get(kube, f"{backends}/kept") is not None, "CacheBackends stay with the CRD"
