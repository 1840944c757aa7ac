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
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from icache_install.manifests_cli import render
from reconciler.kube import ApiError
from tests.harness.controlplane import wait_until
from tests.integration.manifest_apply import Applier
from tests.samples import ROOT
from tests.unit.test_helm_chart import VALUE_SETS, template

NAMESPACE = "inference-cache-system"
OPERATOR_CRDS = (
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
NOT_SERVED = {"Issuer", "Certificate"}


@pytest.fixture(scope="module")
def applier(kube_api_client: client.ApiClient) -> Applier:
    return Applier(kube_api_client)


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
    for plural in ("servicemonitors", "prometheusrules"):
        path = f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/{plural}"

        def served(path: str = path) -> object:
            return applier.kube.request("GET", path)

        wait_until(served, timeout=30, description=f"{plural} served")


@pytest.fixture(scope="module")
def install_namespace(applier: Applier, cachebackend_crd: dict[str, Any]) -> str:
    for doc in render():
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


def _id(doc: dict[str, Any]) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


MONITORING = [d for d in render("monitoring") if d not in render()]


def test_the_monitoring_variant_adds_the_bundle() -> None:
    assert sorted(_id(d) for d in MONITORING) == [
        "ConfigMap/inference-cache-dashboard",
        "PrometheusRule/inference-cache",
        "ServiceMonitor/inference-cache-dispatcher",
        "ServiceMonitor/inference-cache-webhook",
        "ServiceMonitor/inference-cache-worker",
    ]


@pytest.mark.parametrize("doc", MONITORING, ids=_id)
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
        copy.deepcopy(d) for d in MONITORING if _id(d) == "ServiceMonitor/inference-cache-webhook"
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
        out.append((_id(doc), template_.get("metadata") or {}, template_["spec"]))
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
