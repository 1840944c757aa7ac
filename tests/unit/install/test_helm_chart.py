"""The Helm chart (charts/inference-cache) renders the install kustomize renders.

With default values `helm template` must produce exactly the objects of
`kustomize build manifests/` (the same kinds and names, and the same content once
Helm's own labels are set aside), with the cert-manager mode those of
overlays/cert-manager, with monitoring on those of overlays/monitoring. The only
objects of the chart's own are its install hooks (`icache certs` as Jobs) and, with
cert-manager, the Redis password Secret it generates. Every value the chart offers
is rendered and checked where it lands; `helm lint` passes for each value set.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import env_of
from tests.helm_chart import CHART, KUBE_VERSION, NAMESPACE, VALUE_SETS, Doc, helm, template

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
HELM_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
}
HELM_ANNOTATIONS = {
    "helm.sh/resource-policy",
    "helm.sh/hook",
    "helm.sh/hook-weight",
    "helm.sh/hook-delete-policy",
}

Key = tuple[str, str]


def kustomize(kustomize_bin: Path, directory: Path) -> list[Doc]:
    done = subprocess.run(
        [str(kustomize_bin), "build", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def key(doc: Doc) -> Key:
    return doc["kind"], doc["metadata"]["name"]


def is_hook(doc: Doc) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def without_helm_metadata(doc: Doc) -> Doc:
    """The object as kustomize would have it: Helm's labels and annotations set aside."""
    doc = json.loads(json.dumps(doc))
    meta = doc["metadata"]
    for field, drop in (("labels", HELM_LABELS), ("annotations", HELM_ANNOTATIONS)):
        kept = {k: v for k, v in (meta.get(field) or {}).items() if k not in drop}
        if kept:
            meta[field] = kept
        else:
            meta.pop(field, None)
    return doc


def by_key(docs: list[Doc]) -> dict[Key, Doc]:
    out: dict[Key, Doc] = {}
    for doc in docs:
        assert key(doc) not in out, f"{key(doc)} rendered twice"
        out[key(doc)] = doc
    return out


def assert_same_install(chart: list[Doc], kustomized: list[Doc], extra: set[Key]) -> None:
    """The release's objects and kustomize's are the same; the chart's Namespace is a
    hook (it must exist before the certificate hooks) but compared too."""
    ours = by_key(
        [without_helm_metadata(d) for d in chart if not is_hook(d) or d["kind"] == "Namespace"]
    )
    theirs = by_key(kustomized)
    assert set(ours) - extra == set(theirs), (
        f"only in the chart: {sorted(set(ours) - extra - set(theirs))}; "
        f"only in kustomize: {sorted(set(theirs) - set(ours))}"
    )
    for k, expected in theirs.items():
        if ours[k] != expected:
            diff = difflib.unified_diff(
                yaml.safe_dump(expected).splitlines(),
                yaml.safe_dump(ours[k]).splitlines(),
                "kustomize",
                "helm",
                lineterm="",
            )
            raise AssertionError(f"{k} differs:\n" + "\n".join(diff))


def test_default_values_render_the_kustomize_install(
    helm_bin: Path, kustomize_bin: Path, tmp_path: Path
) -> None:
    """The Namespace too when the chart is asked to create it (with --create-namespace,
    Helm creates it instead and the chart leaves it out)."""
    kustomized = kustomize(kustomize_bin, MANIFESTS)
    without_namespace = [d for d in kustomized if d["kind"] != "Namespace"]
    assert_same_install(template(helm_bin, None, tmp_path), without_namespace, set())
    with_namespace = template(helm_bin, {"namespace": {"create": True}}, tmp_path)
    assert_same_install(with_namespace, kustomized, set())


def test_cert_manager_mode_renders_the_cert_manager_variant(
    helm_bin: Path, kustomize_bin: Path, tmp_path: Path
) -> None:
    chart = template(helm_bin, VALUE_SETS["cert-manager"], tmp_path)
    kustomized = [
        d
        for d in kustomize(kustomize_bin, MANIFESTS / "overlays" / "cert-manager")
        if d["kind"] != "Namespace"
    ]
    # No `icache certs` runs, so the chart makes the Redis password itself.
    assert_same_install(chart, kustomized, {("Secret", "inference-cache-redis-auth")})
    assert not [d for d in chart if is_hook(d)], "no certificate hooks with cert-manager"


def test_monitoring_renders_the_monitoring_variant(
    helm_bin: Path, kustomize_bin: Path, tmp_path: Path
) -> None:
    chart = template(helm_bin, VALUE_SETS["monitoring"], tmp_path)
    kustomized = [
        d
        for d in kustomize(kustomize_bin, MANIFESTS / "overlays" / "monitoring")
        if d["kind"] != "Namespace"
    ]
    assert_same_install(chart, kustomized, set())


def test_the_self_signed_hooks_run_icache_certs_before_and_after_the_release(
    helm_bin: Path, tmp_path: Path
) -> None:
    """Before: the Secrets (so the webhook pods can start, also under `--wait`); after:
    caBundle into the configurations, which exist by then."""
    hooks = {key(d): d for d in template(helm_bin, None, tmp_path) if is_hook(d)}
    jobs = {name: d for (kind, name), d in hooks.items() if kind == "Job"}
    assert set(jobs) == {"inference-cache-certs-secrets", "inference-cache-certs-cabundle"}

    def when(doc: Doc) -> str:
        return str(doc["metadata"]["annotations"]["helm.sh/hook"])

    def args(doc: Doc) -> list[str]:
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        return list(container["args"])

    assert when(jobs["inference-cache-certs-secrets"]) == "pre-install,pre-upgrade"
    assert "--mutating-config=" in args(jobs["inference-cache-certs-secrets"])
    assert when(jobs["inference-cache-certs-cabundle"]) == "post-install,post-upgrade"
    assert args(jobs["inference-cache-certs-cabundle"]) == ["certs", "--namespace=$(POD_NAMESPACE)"]
    for (kind, _), doc in hooks.items():
        assert "hook-succeeded" in doc["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
        if kind != "Job":  # the hooks' identity exists for both phases, and before the Jobs
            assert int(doc["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
            assert when(doc) == "pre-install,pre-upgrade,post-install,post-upgrade"


@pytest.mark.parametrize("mode", ["self-signed", "cert-manager"])
def test_a_created_namespace_exists_before_every_hook_and_is_never_deleted_by_helm(
    helm_bin: Path, tmp_path: Path, mode: str
) -> None:
    """namespace.create=true: the certificate hooks run before the release's objects,
    so the Namespace is a pre-install hook of a lower weight than any other. Helm's
    default hook delete policy (before-hook-creation) would delete an existing
    namespace with everything in it, so the policy is set, and never deletes it on
    success; uninstall keeps it (resource-policy keep: a hook is not the release's)."""
    values = {"namespace": {"name": "cache-ops", "create": True}, "certificates": {"mode": mode}}
    hooks = [d for d in template(helm_bin, values, tmp_path) if is_hook(d)]
    (namespace,) = [d for d in hooks if d["kind"] == "Namespace"]
    annotations = namespace["metadata"]["annotations"]
    assert namespace["metadata"]["name"] == "cache-ops"
    assert annotations["helm.sh/hook"] == "pre-install"
    policies = set(annotations["helm.sh/hook-delete-policy"].split(","))
    assert policies == {"hook-failed"}
    assert annotations["helm.sh/resource-policy"] == "keep"
    weight = int(annotations["helm.sh/hook-weight"])
    for doc in hooks:
        if doc is not namespace and "pre-install" in doc["metadata"]["annotations"]["helm.sh/hook"]:
            assert weight < int(doc["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
    assert (mode == "self-signed") == any(d["kind"] == "Job" for d in hooks)


def _pods(docs: list[Doc]) -> dict[Key, Doc]:
    """Pod specs by owning object (Deployments, the CronJob, Jobs)."""
    out: dict[Key, Doc] = {}
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc["kind"] in ("Deployment", "Job"):
            out[key(doc)] = spec["template"]["spec"]
        elif doc["kind"] == "CronJob":
            out[key(doc)] = spec["jobTemplate"]["spec"]["template"]["spec"]
    return out


def test_every_value_lands_where_it_should(helm_bin: Path, tmp_path: Path) -> None:
    values = VALUE_SETS["production"]
    docs = template(helm_bin, values, tmp_path)
    objects = by_key(docs)
    # namespace: everything namespaced is in it, the old one appears nowhere.
    rendered = yaml.safe_dump_all(docs)
    assert NAMESPACE not in rendered
    assert (
        objects[("Namespace", "cache-ops")]["metadata"]["labels"][
            "pod-security.kubernetes.io/enforce"
        ]
        == "restricted"
    )
    dashboard = ("ConfigMap", "inference-cache-dashboard")
    assert objects[dashboard]["metadata"]["namespace"] == "monitoring"  # where Grafana looks
    for doc in docs:
        cluster_scoped = doc["kind"] in {"Namespace", "CustomResourceDefinition"} or doc[
            "kind"
        ].startswith(("Cluster", "Mutating", "Validating"))
        if not cluster_scoped and key(doc) != dashboard:
            assert doc["metadata"]["namespace"] == "cache-ops", key(doc)
    # images, scheduling, priority class: on every pod.
    for owner, pod in _pods(docs).items():
        assert pod["priorityClassName"] == "system-cluster-critical", owner
        assert pod["nodeSelector"] == {"node-role": "control"}, owner
        assert pod["tolerations"] == values["tolerations"], owner
        for container in pod["containers"]:
            if owner[1] != "inference-cache-redis":
                assert container["image"].startswith("registry.example/ic/"), owner
                assert container["image"].endswith(":1.2.3"), owner
    webhook = _pods(docs)[("Deployment", "inference-cache-webhook")]
    assert webhook["affinity"] == {"podAntiAffinity": {}}
    (container,) = webhook["containers"]
    assert "--workers=4" in container["args"]
    # Helm merges maps: the requests given, the default limit kept.
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"memory": "640Mi"},
    }
    assert objects[("Deployment", "inference-cache-webhook")]["spec"]["replicas"] == 3
    assert ("HorizontalPodAutoscaler", "inference-cache-webhook") not in objects
    assert objects[("Deployment", "inference-cache-dispatcher")]["spec"]["replicas"] == 3
    assert ("PodDisruptionBudget", "inference-cache-dispatcher") not in objects
    assert objects[("Deployment", "inference-cache-worker")]["spec"]["replicas"] == 5
    assert ("PodDisruptionBudget", "inference-cache-worker") in objects
    (worker,) = _pods(docs)[("Deployment", "inference-cache-worker")]["containers"]
    assert "--concurrency=8" in worker["args"]
    config = objects[("ConfigMap", "inference-cache-config")]["data"]
    assert (
        config["ICACHE_KVEVENT_SUBSCRIBER_IMAGE"] == "registry.example/ic/kvevent-subscriber:1.2.3"
    )
    assert config["ICACHE_SERVER_URL"] == "http://index.ops:8081"
    assert config["ICACHE_SERVER_ADDRESS"] == "index.ops:50051"
    monitor = objects[("ServiceMonitor", "inference-cache-webhook")]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    # Not verified: an expired serving certificate must still be scraped (its alert).
    assert monitor["spec"]["endpoints"][0]["tlsConfig"] == {"insecureSkipVerify": True}
    crd = objects[("CustomResourceDefinition", "cachebackends.inferencecache.io")]
    assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})


def test_an_alert_can_be_left_out_of_the_prometheusrule(helm_bin: Path, tmp_path: Path) -> None:
    """InferenceCacheAPIServerFailingOpen reads kube-apiserver's metrics: where
    Prometheus does not scrape kube-apiserver it can be left out, and only it."""

    def alerts(values: dict[str, Any]) -> set[str]:
        (rule,) = [d for d in template(helm_bin, values, tmp_path) if d["kind"] == "PrometheusRule"]
        return {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}

    every = alerts({"monitoring": {"enabled": True}})
    skipped = "InferenceCacheAPIServerFailingOpen"
    fewer = alerts({"monitoring": {"enabled": True, "rules": {"disabled": [skipped]}}})
    assert skipped in every
    assert fewer == every - {skipped}


def test_external_redis_replaces_the_bundled_one(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, VALUE_SETS["external-redis"], tmp_path)
    objects = by_key(docs)
    assert not [k for k in objects if k[1] == "inference-cache-redis"]
    assert objects[("ConfigMap", "inference-cache-config")]["data"]["ICACHE_REDIS_URL"] == (
        "rediss://redis.example.internal:6380/2"
    )
    for name in ("inference-cache-dispatcher", "inference-cache-worker"):
        (container,) = _pods(docs)[("Deployment", name)]["containers"]
        assert env_of(container)["ICACHE_REDIS_PASSWORD"] == {
            "secretKeyRef": {"name": "my-redis", "key": "secret"}
        }
    # The install hooks make no Redis password for a Redis the chart does not run.
    hooks = [d for d in docs if is_hook(d) and d["kind"] == "Job"]
    for job in hooks:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert "--redis-secret=" in container["args"]
    no_password = template(
        helm_bin,
        {"redis": {"enabled": False}, "externalRedis": {"url": "redis://r:6379/0"}},
        tmp_path,
    )
    for name in ("inference-cache-dispatcher", "inference-cache-worker"):
        (container,) = _pods(no_password)[("Deployment", name)]["containers"]
        assert "ICACHE_REDIS_PASSWORD" not in env_of(container)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"enabled": False}}, "externalRedis.url is required"),
        ({"certificates": {"mode": "vault"}}, "certificates.mode must be"),
        (
            {"monitoring": {"enabled": True, "rules": {"disabled": ["NoSuchAlert"]}}},
            "monitoring.rules.disabled: NoSuchAlert is not an alert",
        ),
    ],
)
def test_a_bad_value_set_fails_to_render_with_a_reason(
    helm_bin: Path, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm(
        helm_bin, "template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--values", str(path)
    )
    assert done.returncode != 0
    assert message in done.stderr


@pytest.mark.parametrize("name", [None, *VALUE_SETS])
def test_helm_lint_passes(helm_bin: Path, tmp_path: Path, name: str | None) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
    if name:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(VALUE_SETS[name]))
        args += ["--values", str(path)]
    done = helm(helm_bin, *args)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_chart_files_are_copies_of_their_sources() -> None:
    """The chart reads the CRD, the rules and the dashboard from files/ (Helm cannot
    reach outside the chart); `make manifests` copies them."""
    for copy, source in (
        ("crd.yaml", MANIFESTS / "crd" / "inferencecache.io_cachebackends.yaml"),
        (
            "prometheus-rules.yaml",
            MANIFESTS / "components" / "monitoring" / "prometheus-rules.yaml",
        ),
        ("dashboard.json", MANIFESTS / "components" / "monitoring" / "dashboard.json"),
    ):
        assert (CHART / "files" / copy).read_bytes() == source.read_bytes(), (
            f"charts/inference-cache/files/{copy} is stale: run `make manifests`"
        )
