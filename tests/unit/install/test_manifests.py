"""The install manifests (manifests/) and `icache manifests`, statically.

What the real API server thinks of them is in tests/integration/install/test_install_manifests.py
and test_rbac.py; here: `icache manifests`, and the rules the install must keep (pinned
images, hardened pods, webhook registration matching the app's routes, names that
refer to each other resolving).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_cli.main import SUBCOMMANDS, IcacheParser
from icache_install import certs, certs_cli, manifests_cli, redis_auth
from icache_install.doctor.install import InstallNames
from icache_install.manifests_cli import render_manifests, split_image
from reconciler import metrics as reconciler_metrics
from reconciler.steps.server_client import DEFAULT_TOKEN_PATH
from shared import constants as c
from shared.quantity import parse_quantity
from tests.cli_helpers import paths_unchecked
from tests.samples import ROOT
from webhook_svc.app import PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB

MANIFESTS = ROOT / "manifests"
NAMESPACE = "inference-cache-system"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render_manifests()


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def deployments(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] == "Deployment")


def containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return list(spec.get("initContainers") or []) + list(spec["containers"])


def webhooks(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        w["name"]: w
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for w in d["webhooks"]
    }


# --------------------------------------------------------------------------- what is installed


def test_the_install_holds_every_piece(docs: list[dict[str, Any]]) -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for expected in [
        ("Namespace", NAMESPACE),
        ("CustomResourceDefinition", "cachebackends.inferencecache.io"),
        ("ConfigMap", "inference-cache-config"),
        ("ServiceAccount", "inference-cache-webhook"),
        ("ClusterRole", "inference-cache-webhook"),
        ("ClusterRoleBinding", "inference-cache-webhook"),
        ("Service", "inference-cache-webhook"),
        ("Deployment", "inference-cache-webhook"),
        ("PodDisruptionBudget", "inference-cache-webhook"),
        ("HorizontalPodAutoscaler", "inference-cache-webhook"),
        ("Deployment", "inference-cache-dispatcher"),
        ("Deployment", "inference-cache-worker"),
        ("Deployment", "inference-cache-redis"),
        ("Service", "inference-cache-redis"),
        ("MutatingWebhookConfiguration", "inference-cache-mutating"),
        ("ValidatingWebhookConfiguration", "inference-cache-validating"),
    ]:
        assert expected in kinds
    # No Secret: the default variant gets its certificate from `icache certs`.
    assert not any(d["kind"] == "Secret" for d in docs)


def test_the_crd_is_the_checked_in_one(docs: list[dict[str, Any]]) -> None:
    crd = one(docs, "CustomResourceDefinition", "cachebackends.inferencecache.io")
    assert crd == yaml.safe_load(
        (MANIFESTS / "crd" / "inferencecache.io_cachebackends.yaml").read_text()
    )


CLUSTER_SCOPED = frozenset(
    {
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
        "Namespace",
        "ValidatingWebhookConfiguration",
    }
)


def test_everything_namespaced_is_in_the_install_namespace(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["kind"]
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
    for doc in docs:
        for subject in doc.get("subjects") or []:
            assert subject["namespace"] == NAMESPACE


def test_apply_order_puts_namespace_and_crd_first_and_webhooks_last(
    docs: list[dict[str, Any]],
) -> None:
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert kinds[-2:] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert (
        kinds.index("ServiceAccount")
        < kinds.index("ClusterRoleBinding")
        < kinds.index("Deployment")
    )


# --------------------------------------------------------------------------- images and pods


def test_every_image_is_pinned(docs: list[dict[str, Any]]) -> None:
    for deployment in deployments(docs):
        for container in containers(deployment):
            _, tag, digest = split_image(container["image"])
            assert (tag and tag != "latest") or digest, container["image"]


def test_processes_run_the_right_image(docs: list[dict[str, Any]]) -> None:
    images = {d["metadata"]["name"]: containers(d)[0]["image"] for d in deployments(docs)}
    assert images["inference-cache-webhook"] == "ghcr.io/inference-cache/webhook:0.1.0"
    assert images["inference-cache-dispatcher"] == "ghcr.io/inference-cache/worker:0.1.0"
    assert images["inference-cache-worker"] == "ghcr.io/inference-cache/worker:0.1.0"
    args = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"][0]
        for d in deployments(docs)
    }
    assert args["inference-cache-webhook"] == "webhook"
    assert args["inference-cache-dispatcher"] == "dispatcher"
    assert args["inference-cache-worker"] == "worker"


def test_every_command_line_parses_with_the_real_cli(
    docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt or removed flag in a Deployment would crash-loop the pod. The files
    the pod mounts (certificates, tokens) do not exist here: their checks are off."""
    paths_unchecked(monkeypatch)
    for deployment in deployments(docs):
        container = containers(deployment)[0]
        if not container["image"].startswith(manifests_cli.OUR_IMAGES):
            continue
        subcommand, *rest = container["args"]
        parser = IcacheParser(prog=f"icache {subcommand}")
        importlib.import_module(SUBCOMMANDS[subcommand][0]).add_arguments(parser)
        parsed = parser.parse_args(rest)
        assert parsed is not None


def test_every_pod_is_hardened_and_sized(docs: list[dict[str, Any]]) -> None:
    for deployment in deployments(docs):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in containers(deployment):
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"]["drop"] == ["ALL"]
            assert {"cpu", "memory"} <= set(container["resources"]["requests"])
            assert "memory" in container["resources"]["limits"]


def test_service_accounts_and_config_keys_resolve(docs: list[dict[str, Any]]) -> None:
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    bound = {
        s["name"]
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in d["subjects"]
    }
    config = one(docs, "ConfigMap", "inference-cache-config")["data"]
    for deployment in deployments(docs):
        pod = deployment["spec"]["template"]["spec"]
        if deployment["metadata"]["name"] == "inference-cache-redis":
            assert pod["automountServiceAccountToken"] is False
            continue
        assert pod["serviceAccountName"] in accounts & bound
        for container in containers(deployment):
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if ref:
                    assert ref["name"] == "inference-cache-config"
                    assert ref["key"] in config


def test_services_select_pods_and_ports_that_exist(docs: list[dict[str, Any]]) -> None:
    for service in (d for d in docs if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        (target,) = [
            d
            for d in deployments(docs)
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        port_names = {p["name"] for c in containers(target) for p in c.get("ports") or []}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names


def test_redis_url_points_at_the_bundled_redis(docs: list[dict[str, Any]]) -> None:
    url = one(docs, "ConfigMap", "inference-cache-config")["data"]["ICACHE_REDIS_URL"]
    service = one(docs, "Service", "inference-cache-redis")
    assert url == f"redis://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/0"


def _secret_env(container: dict[str, Any], name: str) -> dict[str, Any]:
    (env,) = [e for e in container.get("env") or [] if e["name"] == name]
    ref: dict[str, Any] = env["valueFrom"]["secretKeyRef"]
    return ref


def test_redis_requires_the_password_from_the_install_secret(docs: list[dict[str, Any]]) -> None:
    """Redis authentication by default; no `--protected-mode no`. Decision "No secret
    on a command line": requirepass comes from a memory-backed config file an init
    container writes with a shell builtin from its env; no argument holds $(VAR)."""
    deployment = one(docs, "Deployment", "inference-cache-redis")
    (redis,) = deployment["spec"]["template"]["spec"]["containers"]
    (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
    args = redis["args"]
    assert "--protected-mode" not in args
    assert "--requirepass" not in args
    assert args[:2] == ["redis-server", "/etc/redis-auth/redis.conf"]
    assert init["command"][:2] == ["sh", "-c"]
    assert '"$REDIS_PASSWORD" > /etc/redis-auth/redis.conf' in init["command"][2]
    for container in (redis, init):
        words = [*container.get("command", []), *container.get("args", [])]
        assert not any("$(" in word for word in words)
    for container, name in ((init, "REDIS_PASSWORD"), (redis, "REDISCLI_AUTH")):
        ref = _secret_env(container, name)
        assert ref == {"name": redis_auth.DEFAULT_SECRET, "key": redis_auth.PASSWORD_KEY}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["auth-config"]["emptyDir"]["medium"] == "Memory"
    assert redis["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]


@pytest.mark.parametrize("name", ["inference-cache-worker", "inference-cache-dispatcher"])
def test_worker_and_dispatcher_read_the_redis_password_from_the_same_secret(
    docs: list[dict[str, Any]], name: str
) -> None:
    (container,) = containers(one(docs, "Deployment", name))
    ref = _secret_env(container, "ICACHE_REDIS_PASSWORD")
    # Not optional: without the Secret the pod waits instead of dialling Redis
    # unauthenticated.
    assert ref == {"name": redis_auth.DEFAULT_SECRET, "key": redis_auth.PASSWORD_KEY}
    # The URL stays password-free in the ConfigMap; the documented JSON6902 patches
    # for an external Redis address env/0 (worker) and env/1 (dispatcher).
    index = 0 if name == "inference-cache-worker" else 1
    assert container["env"][index]["name"] == "ICACHE_REDIS_URL"
    url = one(docs, "ConfigMap", "inference-cache-config")["data"]["ICACHE_REDIS_URL"]
    assert "@" not in url


# --------------------------------------------------------------------------- the webhook


def test_webhook_deployment_probes_tls_and_availability(docs: list[dict[str, Any]]) -> None:
    deployment = one(docs, "Deployment", "inference-cache-webhook")
    (container,) = containers(deployment)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    pod = deployment["spec"]["template"]["spec"]
    (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "inference-cache-webhook-tls"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert f"--tls-cert-file={mount['mountPath']}/tls.crt" in container["args"]
    assert f"--tls-key-file={mount['mountPath']}/tls.key" in container["args"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    # The HPA owns the replica count; several replicas, scaled on CPU.
    assert "replicas" not in deployment["spec"]
    hpa = one(docs, "HorizontalPodAutoscaler", "inference-cache-webhook")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "inference-cache-webhook"
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    pdb = one(docs, "PodDisruptionBudget", "inference-cache-webhook")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


def test_webhook_registrations_match_the_app_and_the_spec(docs: list[dict[str, Any]]) -> None:
    hooks = webhooks(docs)
    assert set(hooks) == {
        "mcachebackend.inferencecache.io",
        "mpod.inferencecache.io",
        "vcachebackend.inferencecache.io",
    }
    service = one(docs, "Service", "inference-cache-webhook")
    expected = {
        "mcachebackend.inferencecache.io": (PATH_MUTATE_CB, "Fail", ["CREATE", "UPDATE"], 10),
        "vcachebackend.inferencecache.io": (PATH_VALIDATE_CB, "Fail", ["CREATE", "UPDATE"], 10),
        "mpod.inferencecache.io": (PATH_MUTATE_POD, "Ignore", ["CREATE"], 5),
    }
    for name, (path, policy, operations, timeout) in expected.items():
        hook = hooks[name]
        assert hook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"],
            "namespace": NAMESPACE,
            "path": path,
            "port": service["spec"]["ports"][0]["port"],
        }
        assert "caBundle" not in hook["clientConfig"]  # re-applying must not clear it
        assert hook["failurePolicy"] == policy
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == timeout
        (rule,) = hook["rules"]
        assert rule["operations"] == operations
    assert hooks["mpod.inferencecache.io"]["rules"][0]["resources"] == ["pods"]
    assert hooks["mcachebackend.inferencecache.io"]["rules"][0]["resources"] == ["cachebackends"]


def test_pod_webhook_stays_out_of_its_own_namespace_and_kube_system(
    docs: list[dict[str, Any]],
) -> None:
    hook = webhooks(docs)["mpod.inferencecache.io"]
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": [NAMESPACE, "kube-system"],
    } in expressions
    opt_out = {"key": "inferencecache.io/pod-webhook", "operator": "NotIn", "values": ["disabled"]}
    assert opt_out in expressions
    assert opt_out in hook["objectSelector"]["matchExpressions"]


def test_webhook_may_only_read_cachebackends(docs: list[dict[str, Any]]) -> None:
    """...and ask SubjectAccessReviews (may the writer of a CacheBackend create the
    workload it shapes?)."""
    role = one(docs, "ClusterRole", "inference-cache-webhook")
    assert role["rules"] == [
        {
            "apiGroups": ["inferencecache.io"],
            "resources": ["cachebackends"],
            "verbs": ["get", "list"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]


# --------------------------------------------------------------------------- dispatcher and worker


def test_dispatcher_runs_two_candidates_for_the_lease_its_role_allows(
    docs: list[dict[str, Any]],
) -> None:
    deployment = one(docs, "Deployment", "inference-cache-dispatcher")
    assert deployment["spec"]["replicas"] == 2
    (container,) = containers(deployment)
    (lease_arg,) = [a for a in container["args"] if a.startswith("--lease-name=")]
    lease = lease_arg.split("=", 1)[1]
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    (binding,) = [
        d
        for d in docs
        if d["kind"] == "RoleBinding" and any(s["name"] == sa for s in d["subjects"])
    ]
    role = one(docs, "Role", binding["roleRef"]["name"])
    named = [r for r in role["rules"] if "leases" in r["resources"] and r.get("resourceNames")]
    assert any(lease in r["resourceNames"] and "update" in r["verbs"] for r in named)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_worker_presents_an_audience_bound_projected_token(docs: list[dict[str, Any]]) -> None:
    deployment = one(docs, "Deployment", "inference-cache-worker")
    (container,) = containers(deployment)
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "projected" in v]
    (source,) = volume["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == "inference-cache-server"
    assert token["expirationSeconds"] <= 3600
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert f"{mount['mountPath']}/{token['path']}" == DEFAULT_TOKEN_PATH
    assert mount["mountPath"] == "/var/run/secrets/inferencecache.io/controller-token"
    assert f"--token-path={DEFAULT_TOKEN_PATH}" in container["args"]


# --------------------------------------------------------------------------- cert-manager variant


def test_cert_manager_variant_issues_the_secret_the_webhook_mounts() -> None:
    docs = render_manifests("cert-manager")
    serving = one(docs, "Certificate", "inference-cache-webhook")
    assert serving["spec"]["secretName"] == "inference-cache-webhook-tls"
    assert serving["spec"]["dnsNames"] == certs.service_hosts("inference-cache-webhook", NAMESPACE)
    issuer = one(docs, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca_cert = one(docs, "Certificate", "inference-cache-webhook-ca")
    assert issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    assert ca_cert["spec"]["isCA"] is True
    assert "selfSigned" in one(docs, "Issuer", ca_cert["spec"]["issuerRef"]["name"])["spec"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (config,) = [d for d in docs if d["kind"] == kind]
        annotations = config["metadata"]["annotations"]
        assert (
            annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/inference-cache-webhook"
        )
    # Everything else is the default install, less the self-signed path's rotation
    # CronJob and its RBAC (cert-manager owns the Secret here).
    rotation = "inference-cache-cert-rotation"
    default = {(d["kind"], d["metadata"]["name"]) for d in render_manifests()}
    assert {name for _, name in default - {(d["kind"], d["metadata"]["name"]) for d in docs}} == {
        rotation
    }
    assert {k for k, name in default if name == rotation} == {
        "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "CronJob"
    }  # fmt: skip


# --------------------------------------------------------------------------- --namespace and --image-tag


def test_namespace_override_leaves_nothing_in_the_old_namespace() -> None:
    docs = render_manifests("cert-manager", namespace="cache-ops")
    assert NAMESPACE not in yaml.safe_dump_all(docs)
    assert one(docs, "Namespace", "cache-ops")
    hook = webhooks(docs)["mpod.inferencecache.io"]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "cache-ops",
        "kube-system",
    ]
    assert hook["clientConfig"]["service"]["namespace"] == "cache-ops"
    serving = one(docs, "Certificate", "inference-cache-webhook")
    assert serving["spec"]["dnsNames"] == certs.service_hosts(
        "inference-cache-webhook", "cache-ops"
    )
    (config,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "cache-ops/inference-cache-webhook"
    )
    # Names that merely contain the namespace's words are untouched.
    assert one(docs, "Deployment", "inference-cache-webhook")


def test_image_tag_retags_our_images_only() -> None:
    docs = render_manifests(image_tag="0.2.0-rc.1")
    images = sorted({c["image"] for d in deployments(docs) for c in containers(d)})
    assert images == [
        "docker.io/library/redis:7.4.2-alpine",
        "ghcr.io/inference-cache/webhook:0.2.0-rc.1",
        "ghcr.io/inference-cache/worker:0.2.0-rc.1",
    ]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("redis", ("redis", None, None)),
        ("redis:7", ("redis", "7", None)),
        ("registry:5000/team/img", ("registry:5000/team/img", None, None)),
        ("registry:5000/team/img:1.2", ("registry:5000/team/img", "1.2", None)),
        ("img:1@sha256:abc", ("img", "1", "sha256:abc")),
    ],
)
def test_split_image(image: str, expected: tuple[str, str | None, str | None]) -> None:
    assert split_image(image) == expected


# --------------------------------------------------------------------------- the command


def test_the_command_prints_the_rendered_file_and_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(variant="default", manifests_dir=None, namespace=None, image_tag=None)
    assert manifests_cli.run(args) == 0
    out = capsys.readouterr().out
    assert out == (MANIFESTS / "rendered" / "install.yaml").read_text()
    assert [d for d in yaml.safe_load_all(out) if d] == render_manifests()
    args.image_tag = "9.9.9"
    assert manifests_cli.run(args) == 0
    assert [d for d in yaml.safe_load_all(capsys.readouterr().out) if d] == render_manifests(
        image_tag="9.9.9"
    )
    # A --manifests-dir without the rendered file is bad input (exit 2).
    args.manifests_dir = tmp_path / "absent"
    assert manifests_cli.run(args) == 2
    assert "ICACHE_MANIFESTS_DIR" in capsys.readouterr().err
    args.image_tag = None
    assert manifests_cli.run(args) == 2
    assert "no rendered manifests" in capsys.readouterr().err


def test_each_variant_has_a_rendered_file_with_its_source() -> None:
    """manifests/rendered/ holds one kustomize rendering per variant (the no-kustomize
    install); test_kustomize_parity.py checks they are current."""
    for file, source in manifests_cli.VARIANTS.values():
        text = (MANIFESTS / "rendered" / file).read_text()
        assert text.startswith("# Generated by `make manifests`"), file
        assert (MANIFESTS / source / "kustomization.yaml").is_file()


# docs/install.md "Webhook memory": per worker, the warmed-up
# process (~90 MiB), 126 bytes per in-flight body byte, ~320 KiB per held connection;
# plus the supervisor (~50 MiB, it only forks and waits).
SUPERVISOR_MIB = 64
WORKER_BASELINE_MIB = 90
PEAK_PER_BODY_BYTE = 126
CONNECTION_MIB = 0.3125


def _mib(quantity: str) -> float:
    return float(parse_quantity(quantity)) / 2**20


def test_webhook_memory_limit_covers_its_workers_at_their_worst(
    docs: list[dict[str, Any]],
) -> None:
    """The webhook pins --workers (no CPU limit, so the default would be
    the node's CPU count) and its memory limit covers that many workers' worst case."""
    from webhook_svc import webhook_cli

    deployment = one(docs, "Deployment", "inference-cache-webhook")
    (container,) = containers(deployment)
    with pytest.MonkeyPatch.context() as patch:
        paths_unchecked(patch)  # the pod's mounted certificate is not here
        parser = argparse.ArgumentParser()
        webhook_cli.add_arguments(parser)
    args = parser.parse_args(container["args"][1:])  # after the subcommand
    assert args.workers >= 1
    budget = max(args.max_inflight_bytes, args.max_body_bytes) / 2**20
    worker = (
        WORKER_BASELINE_MIB + PEAK_PER_BODY_BYTE * budget + CONNECTION_MIB * args.limit_concurrency
    )
    worst = SUPERVISOR_MIB + args.workers * worker
    resources = container["resources"]
    assert _mib(resources["limits"]["memory"]) >= worst, worst
    assert _mib(resources["requests"]["memory"]) >= SUPERVISOR_MIB + args.workers * 64


INSTALL_OBJECTS = (
    ("Deployment", c.WEBHOOK_DEPLOYMENT, c.INSTALL_NAMESPACE),
    ("Service", c.WEBHOOK_SERVICE, c.INSTALL_NAMESPACE),
    ("MutatingWebhookConfiguration", c.MUTATING_WEBHOOK_CONFIGURATION, None),
    ("ValidatingWebhookConfiguration", c.VALIDATING_WEBHOOK_CONFIGURATION, None),
    ("Deployment", c.DISPATCHER_DEPLOYMENT, c.INSTALL_NAMESPACE),
    ("Deployment", c.WORKER_DEPLOYMENT, c.INSTALL_NAMESPACE),
)


@pytest.mark.parametrize(("kind", "name", "namespace"), INSTALL_OBJECTS)
def test_the_install_names_table_names_the_rendered_objects(
    docs: list[dict[str, Any]], kind: str, name: str, namespace: str | None
) -> None:
    """shared/constants.py is the one table of the install's object names: each names an
    object manifests/ renders, in the install namespace."""
    found = one(docs, kind, name)
    assert found["metadata"].get("namespace") == namespace


def test_the_rendered_deployments_refer_to_the_install_names_table(
    docs: list[dict[str, Any]],
) -> None:
    """The objects the install creates outside manifests/ (the webhook's TLS Secret, the
    Redis password Secret, the dispatcher's Lease) are the ones the Deployments name."""
    webhook = yaml.safe_dump(one(docs, "Deployment", c.WEBHOOK_DEPLOYMENT))
    dispatcher = one(docs, "Deployment", c.DISPATCHER_DEPLOYMENT)
    assert f"secretName: {c.WEBHOOK_TLS_SECRET}\n" in webhook
    assert f"--lease-name={c.DISPATCHER_LEASE}" in containers(dispatcher)[0].get("args", [])
    assert f"name: {c.REDIS_AUTH_SECRET}\n" in yaml.safe_dump(dispatcher)


def test_doctor_and_cert_installer_read_the_install_names_table() -> None:
    """The install's object names are defined once (shared/constants.py): doctor's
    defaults, the cert installer's and Redis-auth installer's defaults and the
    dispatcher's Lease read it."""
    names = InstallNames()
    assert (names.namespace, names.mutating_config, names.validating_config) == (
        c.INSTALL_NAMESPACE,
        c.MUTATING_WEBHOOK_CONFIGURATION,
        c.VALIDATING_WEBHOOK_CONFIGURATION,
    )
    assert (names.tls_secret, names.redis_secret, names.lease) == (
        c.WEBHOOK_TLS_SECRET,
        c.REDIS_AUTH_SECRET,
        c.DISPATCHER_LEASE,
    )
    assert names.deployments == (
        c.WEBHOOK_DEPLOYMENT,
        c.DISPATCHER_DEPLOYMENT,
        c.WORKER_DEPLOYMENT,
    )
    assert (certs_cli.DEFAULT_SERVICE, certs_cli.DEFAULT_SECRET) == (
        c.WEBHOOK_SERVICE,
        c.WEBHOOK_TLS_SECRET,
    )
    assert (certs_cli.DEFAULT_MUTATING_CONFIG, certs_cli.DEFAULT_VALIDATING_CONFIG) == (
        c.MUTATING_WEBHOOK_CONFIGURATION,
        c.VALIDATING_WEBHOOK_CONFIGURATION,
    )
    assert redis_auth.DEFAULT_SECRET == c.REDIS_AUTH_SECRET
    assert reconciler_metrics.DEFAULT_LEADER_LEASE == c.DISPATCHER_LEASE
