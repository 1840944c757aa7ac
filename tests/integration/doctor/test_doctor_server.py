"""`icache doctor` against the real API server: constructed states, one per finding code.

Each test builds an install (CRD, webhook configurations, TLS and Redis Secrets, the
three Deployments with their status, the dispatcher Lease) in a namespace of its own,
healthy except for what it breaks, plus CacheBackends and engine pods in an app
namespace, and requires the finding (code, severity, object) and the exit code. The
webhook configurations select no object (the CacheBackend webhooks by objectSelector,
which the doctor does not judge; the Pod webhook by a namespace label no namespace has),
so they change nothing for the session's other tests. A last test runs the command as a user RBAC allows only get/list/watch,
and counts the writes the API server received from it: none.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from icache_install import certs
from icache_install.doctor.conditions import TABLE
from icache_install.doctor.diagnose import Scope, diagnose
from icache_install.doctor.findings import CODES, Finding
from icache_install.doctor.install import InstallNames
from icache_install.doctor.reader import CRDS, ClusterReader
from kubeio.client import Kube
from shared import constants as c
from tests.builders import new_cb, pod
from tests.fakes import FakePrometheus, prometheus_vector
from tests.harness.controlplane import ControlPlane, b64_text, wait_until
from tests.kube_helpers import create_namespace
from tests.webhook_process import ICACHE

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
NEVER = {"inferencecache.io/doctor-test": "never-matches"}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Install:
    """A healthy install in its own namespace; tests break one part at a time."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        ca_age_days: int = 0,
        ca_days: int = 365,
        hosts: tuple[str, ...] = ("127.0.0.1",),
        renamed: bool = False,
    ) -> None:
        self.api = api
        self.kube = Kube(api)
        self.ns = create_namespace(api, "doc-install")
        tag = uuid.uuid4().hex[:6]
        self.names = InstallNames(
            namespace=self.ns,
            mutating_config=f"doctor-mutating-{tag}",
            validating_config=f"doctor-validating-{tag}",
        )
        if renamed:  # every object under a name of its own, none of manifests/'s
            self.names = replace(
                self.names,
                tls_secret=f"tls-{tag}",
                redis_secret=f"redis-{tag}",
                lease=f"lease-{tag}",
                webhook_deployment=f"wh-{tag}",
                dispatcher_deployment=f"disp-{tag}",
                worker_deployment=f"work-{tag}",
            )
        now = _now() - dt.timedelta(days=ca_age_days)
        self.ca = certs.new_ca(now, days=ca_days)
        self.serving = certs.issue_serving(self.ca, list(hosts), now, days=ca_days)
        self.ca_bundle = b64_text(self.ca.cert_pem)

    # -- parts --------------------------------------------------------------------

    def webhooks(self) -> tuple[dict[str, Any], dict[str, Any]]:
        def hook(name: str, path: str, policy: str, timeout: int, **extra: Any) -> dict[str, Any]:
            return {
                "name": name,
                "clientConfig": {"url": f"https://127.0.0.1:1{path}", "caBundle": self.ca_bundle},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [PLURAL],
                    }
                ],
                "failurePolicy": policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": timeout,
                "objectSelector": {"matchLabels": NEVER},
                **extra,
            }

        pod_hook = hook("mpod.inferencecache.io", "/mutate--v1-pod", "Ignore", 5)
        pod_hook["rules"] = [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }
        ]
        pod_hook.pop("objectSelector")
        pod_hook["namespaceSelector"] = {
            "matchLabels": NEVER,
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": [self.ns, "kube-system"],
                }
            ],
        }
        mutating = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.names.mutating_config},
            "webhooks": [
                hook("mcachebackend.inferencecache.io", "/mutate-cb", "Fail", 10),
                pod_hook,
            ],
        }
        validating = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.names.validating_config},
            "webhooks": [hook("vcachebackend.inferencecache.io", "/validate-cb", "Fail", 10)],
        }
        return mutating, validating

    def create(
        self,
        *,
        skip: tuple[str, ...] = (),
        available_since: dt.datetime | None = None,
        lease_renewed: dt.datetime | None = None,
        **overrides: Any,
    ) -> Install:
        mutating, validating = self.webhooks()
        mutating = overrides.get("mutating", mutating)
        validating = overrides.get("validating", validating)
        adm = "/apis/admissionregistration.k8s.io/v1"
        if "mutating" not in skip:
            self.kube.request("POST", f"{adm}/mutatingwebhookconfigurations", body=mutating)
        if "validating" not in skip:
            self.kube.request("POST", f"{adm}/validatingwebhookconfigurations", body=validating)
        core = f"/api/v1/namespaces/{self.ns}"
        if "tls" not in skip:
            data = overrides.get("tls_data") or {
                "tls.crt": b64_text(self.serving.cert_pem),
                "tls.key": b64_text(self.serving.key_pem),
            }
            self.kube.request(
                "POST",
                f"{core}/secrets",
                body={
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "kubernetes.io/tls",
                    "metadata": {"name": self.names.tls_secret},
                    "data": data,
                },
            )
        if "redis" not in skip:
            self.kube.request(
                "POST",
                f"{core}/secrets",
                body={
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": self.names.redis_secret},
                    "stringData": {"password": "x"},
                },
            )
        since = available_since or (_now() - dt.timedelta(hours=1))
        for name in self.names.deployments:
            if name in skip:
                continue
            unavailable = name in overrides.get("unavailable", ())
            self.deployment(name, since, available=not unavailable)
        if "lease" not in skip:
            renewed = lease_renewed or _now()
            self.kube.request(
                "POST",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases",
                body={
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.names.lease},
                    "spec": {
                        "holderIdentity": "dispatcher-0",
                        "leaseDurationSeconds": 15,
                        "renewTime": _micro(renewed),
                        "acquireTime": _micro(renewed),
                    },
                },
            )
        return self

    def deployment(self, name: str, since: dt.datetime, *, available: bool) -> None:
        path = f"/apis/apps/v1/namespaces/{self.ns}/deployments"
        labels = {"app": name}
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        }
        created = self.kube.request("POST", path, body=body)
        created["status"] = {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1 if available else 0,
            "availableReplicas": 1 if available else 0,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if available else "False",
                    "reason": "MinimumReplicasAvailable"
                    if available
                    else "MinimumReplicasUnavailable",
                    "message": "ok"
                    if available
                    else "Deployment does not have minimum availability.",
                    "lastTransitionTime": _iso(since),
                    "lastUpdateTime": _iso(since),
                }
            ],
        }
        self.kube.request("PUT", f"{path}/{name}/status", body=created)

    def close(self) -> None:
        adm = "/apis/admissionregistration.k8s.io/v1"
        for kind, name in (
            ("mutatingwebhookconfigurations", self.names.mutating_config),
            ("validatingwebhookconfigurations", self.names.validating_config),
        ):
            _delete(self.kube, f"{adm}/{kind}/{name}")


def _delete(kube: Kube, path: str) -> None:
    from kubeio.client import ApiError

    try:
        kube.request("DELETE", path)
    except ApiError as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def make_install(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[Any]:
    made: list[Install] = []

    def make(**kwargs: Any) -> Install:
        install = Install(
            kube_api_client,
            **{
                k: kwargs.pop(k)
                for k in ("ca_age_days", "ca_days", "hosts", "renamed")
                if k in kwargs
            },
        )
        made.append(install)
        return install.create(**kwargs)

    yield make
    for install in made:
        install.close()


@pytest.fixture
def app_ns(kube_api_client: client.ApiClient) -> str:
    return create_namespace(kube_api_client, "doc-app")


def run_doctor(api: client.ApiClient, install: Install, namespace: str | None) -> list[Finding]:
    return diagnose(ClusterReader(Kube(api)), Scope(namespace, install.names)).findings


def codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


def one(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, (code, [(f.code, f.message) for f in findings])
    if code in CODES:
        assert matching[0].severity == CODES[code][0], matching[0]
    return matching[0]


def errors(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings if f.severity == "error"}


# ------------------------------------------------------------------ backends / pods


def create_cb(
    api: client.ApiClient,
    ns: str,
    name: str,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """Create backend ns/``name`` (:func:`tests.builders.new_cb`); ``status``: then
    write its status."""
    custom: Any = client.CustomObjectsApi(api)
    body = new_cb(name, labels, **spec)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    if status is not None:
        created["status"] = status
        created = custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, name, created
        )
    out: dict[str, Any] = created
    return out


def ready(
    reason: str = c.REASON_HOST_ONLY_ACTIVE, since: dt.datetime | None = None, **extra: Any
) -> dict[str, Any]:
    t = _iso(since or (_now() - dt.timedelta(hours=1)))
    return {
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": reason,
                "message": "",
                "lastTransitionTime": t,
            },
        ],
        **extra,
    }


def create_pod(
    api: client.ApiClient,
    ns: str,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Create pod ns/``name`` of one vLLM container (:func:`tests.builders.pod`)."""
    core: Any = client.CoreV1Api(api)
    body = pod(labels=labels, annotations=annotations, namespace=None, name=name)
    out: dict[str, Any] = api.sanitize_for_serialization(core.create_namespaced_pod(ns, body))
    return out


def injected(backend: dict[str, Any], uid: str | None = None) -> dict[str, str]:
    meta = backend["metadata"]
    return {
        c.ANNOTATION_INJECTED_BY: f"{meta['namespace']}/{meta['name']}",
        c.ANNOTATION_INJECTED_BY_UID: meta["uid"] if uid is None else uid,
    }


def wait_past(api: client.ApiClient, created: str) -> None:
    """Poll until the API server's clock is past ``created`` (1 s resolution), so an
    object created next is strictly newer."""
    then = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    reader = ClusterReader(Kube(api))

    def later() -> bool:
        reader.get(CRDS, None, "cachebackends.inferencecache.io")
        return reader.now() > then

    wait_until(later, timeout=10, interval=0.2, description="the API server's clock to move on")


# ----------------------------------------------------------------------- install


def test_a_healthy_install_with_a_wired_pod_has_no_problem(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install()
    backend = create_cb(kube_api_client, app_ns, "host", {"app": "vllm"}, ready())
    create_pod(kube_api_client, app_ns, "engine", {"app": "vllm"}, injected(backend))
    found = run_doctor(kube_api_client, install, app_ns)
    problems = [(f.code, f.message) for f in found if f.severity != "info"]
    assert problems == []
    assert one(found, "pod.Wired").object.name == "engine"
    assert one(found, "backend.Ready.HostOnlyActive").severity == "info"


@pytest.mark.parametrize(
    ("skip", "code"),
    [
        (("mutating",), "install.WebhookConfigMissing"),
        (("validating",), "install.WebhookConfigMissing"),
        (("tls",), "install.ServingCertMissing"),
        (("redis",), "install.RedisSecretMissing"),
        (("lease",), "install.LeaseMissing"),
        (("inference-cache-worker",), "install.DeploymentMissing"),
    ],
)
def test_a_missing_part_of_the_install(
    kube_api_client: client.ApiClient,
    make_install: Any,
    app_ns: str,
    skip: tuple[str, ...],
    code: str,
) -> None:
    install = make_install(skip=skip)
    found = run_doctor(kube_api_client, install, app_ns)
    assert errors(found) == {code}, [(f.code, f.message) for f in found]
    one(found, code)


def _edit_pod_hook(install: Install, **changes: Any) -> dict[str, Any]:
    mutating, _ = install.webhooks()
    hook = mutating["webhooks"][1]
    for key, value in changes.items():
        if value is None:
            hook.pop(key, None)
        else:
            hook[key] = value
    return mutating


def _new_install(api: client.ApiClient, **kwargs: Any) -> Install:
    return Install(api, **kwargs)


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"failurePolicy": "Fail"}, "install.WebhookFailurePolicy"),
        ({"timeoutSeconds": 30}, "install.WebhookTimeout"),
        ({"namespaceSelector": {"matchLabels": NEVER}}, "install.WebhookNamespaceSelector"),
    ],
)
def test_a_pod_webhook_that_is_not_ours(
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    app_ns: str,
    changes: dict[str, Any],
    code: str,
) -> None:
    install = Install(kube_api_client)
    try:
        install.create(mutating=_edit_pod_hook(install, **changes))
        found = run_doctor(kube_api_client, install, app_ns)
        finding = one(found, code)
        assert finding.object.name == install.names.mutating_config
        assert "mpod.inferencecache.io" in finding.message
    finally:
        install.close()


def _edit_backend_hook(install: Install, **changes: Any) -> dict[str, Any]:
    _, validating = install.webhooks()
    validating["webhooks"][0].update(changes)
    return validating


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"failurePolicy": "Ignore"}, "install.WebhookFailurePolicy"),
        ({"timeoutSeconds": 2}, "install.WebhookTimeout"),
        ({"namespaceSelector": {"matchLabels": NEVER}}, "install.WebhookNamespaceSelector"),
    ],
)
def test_a_cachebackend_webhook_that_is_not_ours(
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    app_ns: str,
    changes: dict[str, Any],
    code: str,
) -> None:
    """The ValidatingWebhookConfiguration is checked like the Pod webhook: failurePolicy,
    timeoutSeconds, namespaceSelector; each code at its one severity."""
    install = Install(kube_api_client)
    try:
        install.create(validating=_edit_backend_hook(install, **changes))
        found = run_doctor(kube_api_client, install, app_ns)
        finding = one(found, code)
        assert finding.object.name == install.names.validating_config
        assert "vcachebackend.inferencecache.io" in finding.message
    finally:
        install.close()


def test_an_install_under_other_names_is_checked_under_them(
    control_plane: ControlPlane, make_install: Any, app_ns: str
) -> None:
    """icache certs --secret, dispatcher --lease-name, renamed Deployments: the flags
    point the doctor at them, and it finds nothing missing."""
    install = make_install(renamed=True)
    names = install.names
    done = subprocess.run(
        [
            ICACHE,
            "doctor",
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "-n",
            app_ns,
            "-o",
            "json",
            "--install-namespace",
            names.namespace,
            "--mutating-config",
            names.mutating_config,
            "--validating-config",
            names.validating_config,
            "--tls-secret",
            names.tls_secret,
            "--redis-secret",
            names.redis_secret,
            "--lease-name",
            names.lease,
            "--webhook-deployment",
            names.webhook_deployment,
            "--dispatcher-deployment",
            names.dispatcher_deployment,
            "--worker-deployment",
            names.worker_deployment,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["error"] == 0, report["findings"]


def test_a_webhook_missing_from_its_configuration(
    kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any], app_ns: str
) -> None:
    install = Install(kube_api_client)
    try:
        mutating, _ = install.webhooks()
        mutating["webhooks"] = mutating["webhooks"][:1]
        install.create(mutating=mutating)
        found = run_doctor(kube_api_client, install, app_ns)
        assert "mpod.inferencecache.io" in one(found, "install.WebhookMissing").message
    finally:
        install.close()


@pytest.mark.parametrize(
    ("bundle", "code"),
    [
        (None, "install.CABundleMissing"),
        (b64_text(b"not a certificate"), "install.CABundleInvalid"),
        (b64_text(certs.new_ca(_now()).cert_pem), "install.CABundleMismatch"),
    ],
)
def test_a_ca_bundle_that_does_not_serve(
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    app_ns: str,
    bundle: str | None,
    code: str,
) -> None:
    install = Install(kube_api_client)
    try:
        mutating, validating = install.webhooks()
        for config in (mutating, validating):
            for hook in config["webhooks"]:
                if bundle is None:
                    hook["clientConfig"].pop("caBundle")
                else:
                    hook["clientConfig"]["caBundle"] = bundle
        install.create(mutating=mutating, validating=validating)
        found = run_doctor(kube_api_client, install, app_ns)
        assert len([f for f in found if f.code == code]) == 3  # every webhook
        assert errors(found) == {code}
    finally:
        install.close()


@pytest.mark.parametrize(
    ("age", "days", "codes_expected"),
    [
        (20, 10, {"install.CABundleExpired", "install.ServingCertExpired"}),
        (80, 90, {"install.CABundleExpiring", "install.ServingCertExpiring"}),
    ],
)
def test_an_expired_or_expiring_ca_bundle(
    kube_api_client: client.ApiClient,
    make_install: Any,
    app_ns: str,
    age: int,
    days: int,
    codes_expected: set[str],
) -> None:
    """The caBundle verifies the serving certificate but expires (in 14 days or less)."""
    install = make_install(ca_age_days=age, ca_days=days)
    found = run_doctor(kube_api_client, install, app_ns)
    assert codes_expected <= codes(found)
    assert len([f for f in found if f.code.startswith("install.CABundle")]) == 3


def test_a_serving_certificate_for_another_host(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install(hosts=("webhook.example",))
    found = run_doctor(kube_api_client, install, app_ns)
    assert {f.code for f in found if f.severity == "error"} == {"install.ServingCertHostMismatch"}


def test_a_tls_secret_without_a_certificate(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install(tls_data={"tls.crt": b64_text(b"junk"), "tls.key": b64_text(b"junk")})
    found = run_doctor(kube_api_client, install, app_ns)
    one(found, "install.ServingCertInvalid")


def test_an_unavailable_deployment(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install(unavailable=("inference-cache-dispatcher",))
    found = run_doctor(kube_api_client, install, app_ns)
    finding = one(found, "install.DeploymentUnavailable")
    assert finding.object.name == "inference-cache-dispatcher"
    assert "does not have minimum availability" in finding.message


def test_a_stale_lease(kube_api_client: client.ApiClient, make_install: Any, app_ns: str) -> None:
    install = make_install(lease_renewed=_now() - dt.timedelta(minutes=10))
    found = run_doctor(kube_api_client, install, app_ns)
    finding = one(found, "install.LeaseStale")
    assert "dispatcher-0" in finding.message
    assert errors(found) == {"install.LeaseStale"}


# -------------------------------------------------------------------- backends


def test_every_condition_reason_the_spec_defines_becomes_a_finding(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    """Spec "Conditions": each (type, reason) turns into its sentence and next step."""
    install = make_install()
    for i, (type_, reason) in enumerate(sorted(TABLE)):
        status = {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": type_,
                    "status": "False",
                    "reason": reason,
                    "message": f"case {i}",
                    "lastTransitionTime": _iso(_now()),
                }
            ],
        }
        create_cb(kube_api_client, app_ns, f"cond-{i}", {"app": f"a{i}"}, status)
    create_cb(
        kube_api_client,
        app_ns,
        "cond-unknown",
        {"app": "u"},
        {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Bogus",
                    "message": "",
                    "lastTransitionTime": _iso(_now()),
                }
            ]
        },
    )
    found = run_doctor(kube_api_client, install, app_ns)
    for i, ((type_, reason), explanation) in enumerate(sorted(TABLE.items())):
        finding = next(
            f
            for f in found
            if f.object.name == f"cond-{i}" and f.code.startswith("backend." + type_)
        )
        assert finding.code == f"backend.{type_}.{reason}"
        assert finding.severity == explanation.severity
        assert explanation.sentence in finding.message
        assert f"case {i}" in finding.message
    assert one(found, "backend.UnknownCondition").object.name == "cond-unknown"


def test_backend_spec_and_status_findings(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install()
    create_cb(kube_api_client, app_ns, "never-reconciled", {"app": "x"})
    lagging = create_cb(kube_api_client, app_ns, "lagging", {"app": "lag"}, ready())
    custom: Any = client.CustomObjectsApi(kube_api_client)
    lagging["spec"]["replicas"] = 2  # a new generation the status has not seen
    custom.replace_namespaced_custom_object(GROUP, VERSION, app_ns, PLURAL, "lagging", lagging)
    create_cb(kube_api_client, app_ns, "no-selector", None, ready())
    create_cb(
        kube_api_client,
        app_ns,
        "moon",
        {"app": "moon"},
        ready(c.REASON_BACKEND_READY),
        remoteStorage={"provider": "Mooncake", "ownership": "Managed"},
    )
    create_cb(
        kube_api_client,
        app_ns,
        "closed",
        {"app": "closed"},
        ready(),
        integration={"failOpen": False},
    )
    create_pod(kube_api_client, app_ns, "lag-pod", {"app": "lag"})
    found = run_doctor(kube_api_client, install, app_ns)
    assert one(found, "backend.NotReconciled").object.name == "never-reconciled"
    assert one(found, "backend.ObservedGenerationLagging").object.name == "lagging"
    assert one(found, "backend.NoEngineSelector").object.name == "no-selector"
    assert one(found, "backend.MooncakeWithoutHostNetwork").object.name == "moon"
    assert one(found, "backend.FailClosed").object.name == "closed"
    unmatched = {f.object.name for f in found if f.code == "backend.SelectorMatchesNoPod"}
    assert unmatched == {"never-reconciled", "moon", "closed"}


def test_overlapping_selectors_name_the_winner_in_list_order(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    """Spec "Mutating Pod webhook": the first matching CacheBackend wins."""
    install = make_install()
    create_cb(kube_api_client, app_ns, "b-narrow", {"app": "vllm", "tier": "gold"}, ready())
    wide = create_cb(kube_api_client, app_ns, "a-wide", {"app": "vllm"}, ready())
    create_pod(kube_api_client, app_ns, "gold-0", {"app": "vllm", "tier": "gold"}, injected(wide))
    found = run_doctor(kube_api_client, install, app_ns)
    overlap = one(found, "backend.SelectorOverlap")
    assert overlap.object.name == "b-narrow"
    assert overlap.details["winner"] == "a-wide"
    assert "API server's list order" in overlap.message
    assert "gold-0" in overlap.message


# ------------------------------------------------------------------------ pods


def test_pod_findings_wired_stale_orphaned_and_opted_out(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install()
    backend = create_cb(kube_api_client, app_ns, "host", {"app": "vllm"}, ready())
    other = create_cb(kube_api_client, app_ns, "other", {"app": "other"}, ready())
    create_pod(kube_api_client, app_ns, "wired", {"app": "vllm"}, injected(backend))
    create_pod(kube_api_client, app_ns, "stale", {"app": "vllm"}, injected(backend, uid="0000-old"))
    create_pod(
        kube_api_client,
        app_ns,
        "no-uid",
        {"app": "vllm"},
        {c.ANNOTATION_INJECTED_BY: f"{app_ns}/host"},
    )
    create_pod(
        kube_api_client,
        app_ns,
        "orphan",
        {"app": "gone"},
        {c.ANNOTATION_INJECTED_BY: f"{app_ns}/deleted", c.ANNOTATION_INJECTED_BY_UID: "1234"},
    )
    create_pod(kube_api_client, app_ns, "moved", {"app": "vllm"}, injected(other))
    create_pod(
        kube_api_client, app_ns, "opted-out", {"app": "vllm"}, {c.ANNOTATION_SKIP_INJECT: "true"}
    )
    found = run_doctor(kube_api_client, install, app_ns)
    by_pod = {f.object.name: f.code for f in found if f.code.startswith("pod.")}
    assert by_pod == {
        "wired": "pod.Wired",
        "stale": "pod.StaleUID",
        "no-uid": "pod.InjectedWithoutUID",
        "orphan": "pod.InjectedByMissingBackend",
        "moved": "pod.WiredToAnotherBackend",
        "opted-out": "pod.SkipInject",
    }


def test_unwired_pods_get_their_likely_reason(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    install = make_install()
    early = create_pod(kube_api_client, app_ns, "early", {"app": "late"})
    wait_past(kube_api_client, early["metadata"]["creationTimestamp"])
    create_cb(kube_api_client, app_ns, "late", {"app": "late"}, ready())
    managed = {"provider": "LMCacheServer", "ownership": "Managed"}
    create_cb(
        kube_api_client,
        app_ns,
        "pending",
        {"app": "pending"},
        {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "RolloutInProgress",
                    "message": "",
                    "lastTransitionTime": _iso(_now()),
                }
            ]
        },
        remoteStorage=managed,
    )
    create_pod(kube_api_client, app_ns, "no-endpoint", {"app": "pending"})
    before = create_pod(kube_api_client, app_ns, "before-endpoint", {"app": "served"})
    wait_past(kube_api_client, before["metadata"]["creationTimestamp"])
    create_cb(
        kube_api_client,
        app_ns,
        "served",
        {"app": "served"},
        ready(
            c.REASON_KV_EVENTS_OBSERVED,
            since=_now() + dt.timedelta(seconds=1),
            endpoint=f"served.{app_ns}.svc:65432",
        ),
        remoteStorage=managed,
    )
    create_cb(kube_api_client, app_ns, "plain", {"app": "plain"}, ready())
    create_pod(kube_api_client, app_ns, "unexplained", {"app": "plain"})
    found = run_doctor(kube_api_client, install, app_ns)
    by_pod = {f.object.name: f.code for f in found if f.code.startswith("pod.")}
    assert by_pod == {
        "early": "pod.UnwiredCreatedBeforeBackend",
        "no-endpoint": "pod.UnwiredNoEndpoint",
        "before-endpoint": "pod.UnwiredCreatedBeforeBackend",
        "unexplained": "pod.Unwired",
    }


def test_a_pod_created_before_its_backend_became_ready(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    """Created after the backend, before its Ready transition (its endpoint)."""
    install = make_install()
    managed = {"provider": "LMCacheServer", "ownership": "Managed"}
    backend = create_cb(kube_api_client, app_ns, "served", {"app": "served"}, remoteStorage=managed)
    wait_past(kube_api_client, backend["metadata"]["creationTimestamp"])
    engine = create_pod(kube_api_client, app_ns, "engine", {"app": "served"})
    created = dt.datetime.fromisoformat(
        engine["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    )
    custom: Any = client.CustomObjectsApi(kube_api_client)
    backend = custom.get_namespaced_custom_object(GROUP, VERSION, app_ns, PLURAL, "served")
    backend["status"] = ready(
        c.REASON_KV_EVENTS_OBSERVED,
        since=created + dt.timedelta(seconds=5),
        endpoint=f"served.{app_ns}.svc:65432",
    )
    custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, app_ns, PLURAL, "served", backend
    )
    found = run_doctor(kube_api_client, install, app_ns)
    assert one(found, "pod.UnwiredCreatedBeforeEndpoint").object.name == "engine"


def test_a_pod_created_while_the_webhook_was_down(
    kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    """The webhook Deployment became Available only after the pod was created."""
    install = make_install(available_since=_now() + dt.timedelta(minutes=1))
    create_cb(kube_api_client, app_ns, "host", {"app": "vllm"}, ready())
    create_pod(kube_api_client, app_ns, "engine", {"app": "vllm"})
    found = run_doctor(kube_api_client, install, app_ns)
    finding = one(found, "pod.UnwiredWebhookDown")
    assert "rollout restart" in finding.next_step or "delete" in finding.next_step


# ------------------------------------------------------------- the command


def _reader_kubeconfig(control_plane: ControlPlane, tmp_path: Path, user: str) -> Path:
    """A user RBAC allows get/list/watch on what the doctor reads, nothing else."""
    api = control_plane.api_client()
    rbac: Any = client.RbacAuthorizationV1Api(api)
    role_name = f"icache-doctor-read-{uuid.uuid4().hex[:6]}"
    read = ["get", "list", "watch"]
    rbac.create_cluster_role(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role_name},
            "rules": [
                {
                    "apiGroups": ["apiextensions.k8s.io"],
                    "resources": ["customresourcedefinitions"],
                    "verbs": read,
                },
                {
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": [
                        "mutatingwebhookconfigurations",
                        "validatingwebhookconfigurations",
                    ],
                    "verbs": read,
                },
                {"apiGroups": [""], "resources": ["secrets", "pods"], "verbs": read},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": read},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": read},
                {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": read},
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role_name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role_name,
            },
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    api.close()
    return control_plane.write_kubeconfig(
        tmp_path / "reader.kubeconfig", control_plane.client_keypair(user)
    )


def test_the_command_is_read_only_and_exits_1_on_an_error(
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
    make_install: Any,
    app_ns: str,
    tmp_path: Path,
) -> None:
    """Run as a user who may only get/list/watch: it completes, and the audit log shows
    reads from it and not a single write."""
    user = f"doctor-{uuid.uuid4().hex[:6]}"
    kubeconfig = _reader_kubeconfig(control_plane, tmp_path, user)
    install = make_install(lease_renewed=_now() - dt.timedelta(minutes=10))
    backend = create_cb(kube_api_client, app_ns, "host", {"app": "vllm"}, ready())
    create_pod(kube_api_client, app_ns, "stale", {"app": "vllm"}, injected(backend, uid="old"))
    since = control_plane.audit_offset()
    base = [
        ICACHE,
        "doctor",
        "--kubeconfig",
        str(kubeconfig),
        "--install-namespace",
        install.ns,
        "--mutating-config",
        install.names.mutating_config,
        "--validating-config",
        install.names.validating_config,
    ]
    args = [*base, "-A", "-o", "json"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    found = {(f["code"], f["object"]["name"]) for f in report["findings"]}
    assert ("install.LeaseStale", install.names.lease) in found
    assert ("pod.StaleUID", "stale") in found
    assert not any(f["code"].startswith("doctor.") for f in report["findings"]), report
    control_plane.audit_barrier(since)
    assert control_plane.count_writes(since, user=user) == 0
    assert len(control_plane.audit_events(since, user=user)) >= 8
    # Text: like kubectl describe, no colour when stdout is not a terminal.
    text = subprocess.run([*base, "-A"], capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 1
    assert "\033[" not in text.stdout
    assert "install.LeaseStale" in text.stdout
    assert "Next:" in text.stdout


def test_a_forbidden_read_is_a_finding_not_a_crash(
    control_plane: ControlPlane, make_install: Any, app_ns: str, tmp_path: Path
) -> None:
    install = make_install()
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "nobody.kubeconfig",
        control_plane.client_keypair(f"nobody-{uuid.uuid4().hex[:6]}"),
    )
    done = subprocess.run(
        [
            ICACHE,
            "doctor",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            app_ns,
            "-o",
            "json",
            "--install-namespace",
            install.ns,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert {f["code"] for f in report["findings"]} == {"doctor.ReadForbidden"}
    assert done.returncode == 1  # a check that could not run does not pass a gate


# ------------------------------------------------------------------------ the CRD


@pytest.fixture(scope="module")
def crd_plane() -> Iterator[ControlPlane]:
    """A control plane of this module's own: the CRD checks install another CRD under
    the one name every other test of the session relies on."""
    cp = ControlPlane(audit=False)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}"


def _set_crd(plane: ControlPlane, body: dict[str, Any] | None) -> Kube:
    """Make the CacheBackend CRD ``body`` (None: no CRD), waiting until the API server
    has dropped the old one and established the new one."""
    from kubeio.client import ApiError

    kube = Kube(plane.api_client())
    _delete(kube, CRD_PATH)

    def gone() -> bool:
        try:
            kube.request("GET", CRD_PATH)
        except ApiError as exc:
            return exc.status == 404
        return False

    wait_until(gone, timeout=60, interval=0.2, description="the old CRD to be deleted")
    if body is not None:
        kube.request("POST", CRD_PATH.rsplit("/", 1)[0], body=body)

        def established() -> bool:
            conditions = (kube.request("GET", CRD_PATH).get("status") or {}).get("conditions")
            return any(
                c_["type"] == "Established" and c_["status"] == "True" for c_ in conditions or []
            )

        wait_until(established, timeout=60, interval=0.2, description="the CRD to be established")
    return kube


def _diagnose_crd(kube: Kube) -> list[Finding]:
    return diagnose(ClusterReader(kube), Scope("default")).findings


def _our_crd() -> dict[str, Any]:
    from shared.api.crd import crd

    out: dict[str, Any] = json.loads(json.dumps(crd()))
    return out


def test_a_missing_crd(crd_plane: ControlPlane) -> None:
    found = _diagnose_crd(_set_crd(crd_plane, None))
    assert one(found, "install.CRDMissing").object.name == f"{PLURAL}.{GROUP}"


def test_a_crd_that_does_not_serve_this_version(crd_plane: ControlPlane) -> None:
    other = _our_crd()
    other["spec"]["versions"][0]["name"] = "v1beta9"
    found = _diagnose_crd(_set_crd(crd_plane, other))
    assert "v1beta9" in one(found, "install.CRDVersionNotServed").message


def test_a_crd_from_another_release(crd_plane: ControlPlane) -> None:
    other = _our_crd()
    schema = other["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"].pop("replicas")
    found = _diagnose_crd(_set_crd(crd_plane, other))
    one(found, "install.CRDSchemaDrift")
    assert "install.CRDVersionNotServed" not in codes(found)


def test_a_read_that_fails_is_a_finding(crd_plane: ControlPlane) -> None:
    """doctor.ReadFailed: the CacheBackend list fails on the API server (500), because
    the stored objects need a conversion webhook that does not answer."""
    crd = _our_crd()
    ours = crd["spec"]["versions"][0]
    ours["storage"] = False
    stored = {**json.loads(json.dumps(ours)), "name": "v1beta1", "storage": True}
    stored["schema"] = {
        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    }
    stored.pop("subresources", None)
    stored.pop("additionalPrinterColumns", None)
    crd["spec"]["versions"] = [ours, stored]
    crd["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "url": "https://127.0.0.1:1/convert",
                "caBundle": b64_text(certs.new_ca(_now()).cert_pem),
            },
        },
    }
    kube = _set_crd(crd_plane, crd)
    kube.request(
        "POST",
        f"/apis/{GROUP}/v1beta1/namespaces/default/{PLURAL}",
        body={
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "CacheBackend",
            "metadata": {"name": "stored-in-v1beta1"},
            "spec": {"runtime": "VLLM"},
        },
    )
    found = _diagnose_crd(kube)
    failed = one(found, "doctor.ReadFailed")
    assert failed.object.kind == "CacheBackend"
    assert "500" in failed.message


# ----------------------------------------------------------- --prometheus URL


def test_doctor_prometheus_reports_the_engines_view_of_each_backend(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, make_install: Any, app_ns: str
) -> None:
    """docs/doctor.md "The engines' own view": `icache doctor --prometheus URL` asks that
    Prometheus (a loopback server answering its query API), and nothing else, for the
    per-CacheBackend engine series: zero hits and remote errors are findings, a backend
    Prometheus has no series of is not scraped; a failing Prometheus is an error."""
    make_install()
    create_cb(kube_api_client, app_ns, "silent", {"app": "a"}, ready())
    create_cb(kube_api_client, app_ns, "unscraped", {"app": "b"}, ready())
    with FakePrometheus() as prometheus:
        prometheus.answers = {
            "inferencecache:offload_hit_ratio:rate5m": prometheus_vector((app_ns, "silent", "0")),
            "inferencecache:offload_lookup_tokens:rate5m": prometheus_vector(
                (app_ns, "silent", "300")
            ),
            "inferencecache:remote_errors:rate5m": prometheus_vector((app_ns, "silent", "1.5")),
            "inferencecache:engine_healthy": prometheus_vector(),
        }
        report, rc = _doctor_json(control_plane, app_ns, prometheus.url)
        assert set(prometheus.seen) == {"/api/v1/query"}
        found = {(f["code"], f["object"]["name"]) for f in report["findings"]}
        assert ("backend.OffloadNoHits", "silent") in found
        assert ("backend.RemoteTierErrors", "silent") in found
        assert ("backend.NoEngineMetrics", "unscraped") in found
        assert rc == 1  # remote-tier errors are an error finding
        prometheus.answers = {}
        report, rc = _doctor_json(control_plane, app_ns, prometheus.url)
        assert "doctor.PrometheusQueryFailed" in {f["code"] for f in report["findings"]}
        assert rc == 1


def _doctor_json(control_plane: ControlPlane, namespace: str, url: str) -> tuple[Any, int]:
    done = subprocess.run(
        [
            ICACHE,
            "doctor",
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "-n",
            namespace,
            "-o",
            "json",
            "--prometheus",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), done.returncode
