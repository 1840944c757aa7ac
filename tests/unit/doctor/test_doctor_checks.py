"""`icache doctor`'s pure checks that the API-server tests cannot construct without
breaking the session (the CRD itself), the catalogue of codes, and the output."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from icache_install.doctor import conditions
from icache_install.doctor.cli import install_names
from icache_install.doctor.findings import CODES, ObjectRef, Severity, finding
from icache_install.doctor.install import InstallNames, check_crd, check_webhook_configs
from icache_install.doctor.render import json_report, text_report
from shared import constants as c
from shared.api.crd import crd


def test_a_missing_crd() -> None:
    (found,) = check_crd(None)
    assert found.code == "install.CRDMissing"
    assert found.severity == Severity.ERROR


def test_the_crd_of_this_binary_passes() -> None:
    assert check_crd(crd()) == []


def test_a_crd_without_our_version_served() -> None:
    other = copy.deepcopy(crd())
    other["spec"]["versions"][0]["name"] = "v1beta9"
    (found,) = check_crd(other)
    assert found.code == "install.CRDVersionNotServed"
    assert "v1beta9" in found.message


def test_a_crd_from_another_release() -> None:
    other = copy.deepcopy(crd())
    schema = other["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"].pop("replicas")
    (found,) = check_crd(other)
    assert found.code == "install.CRDSchemaDrift"
    assert found.severity == Severity.WARNING


def test_every_condition_reason_in_constants_is_explained() -> None:
    """Spec "Conditions": every reason the spec (and shared/constants.py) defines has a
    sentence and, where there is something to do, a next step."""
    reasons = {v for k, v in vars(c).items() if k.startswith("REASON_")}
    explained = {reason for _, reason in conditions.TABLE}
    assert reasons <= explained, reasons - explained
    for (type_, reason), explanation in conditions.TABLE.items():
        assert explanation.sentence, (type_, reason)
        if explanation.severity != Severity.INFO:
            assert explanation.next_step, (type_, reason)


def test_every_condition_type_is_covered() -> None:
    types = {v for k, v in vars(c).items() if k.startswith("COND_")}
    assert {t for t, _ in conditions.TABLE} == types


def test_codes_are_dotted_and_documented() -> None:
    from tests.samples import ROOT

    doc = (ROOT / "docs" / "doctor.md").read_text()
    for code in CODES:
        area, _, name = code.partition(".")
        assert area in {"install", "backend", "pod", "doctor"}, code
        assert name, code
        assert f"`{code}`" in doc, f"docs/doctor.md does not list {code}"
    for type_, reason in conditions.TABLE:
        assert f"`backend.{type_}.{reason}`" in doc, (type_, reason)


def _sample() -> list:
    return [
        finding("install.LeaseStale", ObjectRef("Lease", "l", "ns"), "stale", "fix it"),
        finding("pod.Wired", ObjectRef("Pod", "p", "app"), "wired"),
    ]


def test_text_output_reads_like_describe_and_colours_only_when_asked() -> None:
    args: dict[str, Any] = {
        "server": "https://k",
        "scope": "namespace app",
        "install_namespace": "ns",
        "pods_checked": 1,
        "backends": 1,
        "verbose": False,
    }
    plain = text_report(_sample(), colour=False, **args)
    assert "\033[" not in plain
    assert "Install:\n  Error    install.LeaseStale  Lease ns/l\n           stale\n" in plain
    assert "Next: fix it" in plain
    assert "pod.Wired" not in plain  # info hidden by default
    assert "Summary: 1 error(s), 0 warning(s), 1 info (info hidden: -v shows it)" in plain
    coloured = text_report(_sample(), colour=True, **{**args, "verbose": True})
    assert "\033[31m" in coloured
    assert "pod.Wired" in coloured


def test_json_output_is_stable() -> None:
    """docs/doctor.md documents this shape."""
    report = json.loads(
        json_report(
            _sample(),
            server="https://k",
            namespace=None,
            install_namespace="ns",
            pods_checked=1,
            backends=2,
        )
    )
    assert set(report) == {
        "apiVersion",
        "kind",
        "cluster",
        "scope",
        "install",
        "checked",
        "findings",
        "summary",
    }
    assert report["kind"] == "DoctorReport"
    assert report["scope"] == {"namespace": None, "allNamespaces": True}
    assert report["summary"] == {"error": 1, "warning": 0, "info": 1}
    assert set(report["findings"][0]) == {
        "code",
        "severity",
        "object",
        "message",
        "nextStep",
        "details",
    }
    assert report["findings"][0]["object"] == {"kind": "Lease", "namespace": "ns", "name": "l"}


class _FailingReader:
    """Every read answers 500: the checks that need it are skipped, each with a finding."""

    requests = 0
    server = "https://k"

    def now(self) -> Any:
        import datetime as dt

        return dt.datetime.now(dt.UTC)

    def _fail(self, *_: Any, **__: Any) -> Any:
        from icache_install.doctor.reader import ReadError

        raise ReadError("something", 500, "Internal Server Error")

    get = exists = list = _fail


def test_a_failing_api_server_is_a_finding_not_a_crash() -> None:
    from icache_install.doctor.diagnose import Scope, diagnose

    result = diagnose(_FailingReader(), Scope("team-a"))  # type: ignore[arg-type]
    assert result.findings
    assert {f.code for f in result.findings} == {"doctor.ReadFailed"}
    assert all(f.severity == Severity.ERROR for f in result.findings)


# ------------------------------------------------------------ webhook configurations


def _hook(name: str, policy: str, timeout: int | None, selector: Any = None) -> dict[str, Any]:
    hook: dict[str, Any] = {"name": name, "failurePolicy": policy}
    if timeout is not None:
        hook["timeoutSeconds"] = timeout
    if selector is not None:
        hook["namespaceSelector"] = selector
    return hook


def _excluding(*namespaces: str) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(namespaces)}
        ]
    }


def _configs(**changes: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """The install's webhook configurations (as manifests/ renders them), with
    ``changes`` merged into the webhook of that name."""
    names = InstallNames()
    hooks = {
        "mcachebackend": _hook("mcachebackend.inferencecache.io", "Fail", 10),
        "mpod": _hook(
            "mpod.inferencecache.io", "Ignore", 5, _excluding(names.namespace, "kube-system")
        ),
        "vcachebackend": _hook("vcachebackend.inferencecache.io", "Fail", 10),
    }
    for key, change in changes.items():
        hooks[key].update(change)
    return {
        "MutatingWebhookConfiguration": {
            "metadata": {"name": names.mutating_config},
            "webhooks": [hooks["mcachebackend"], hooks["mpod"]],
        },
        "ValidatingWebhookConfiguration": {
            "metadata": {"name": names.validating_config},
            "webhooks": [hooks["vcachebackend"]],
        },
    }


def test_the_install_webhook_configurations_pass() -> None:
    assert check_webhook_configs(_configs(), InstallNames()) == []


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"mpod": {"failurePolicy": "Fail"}}, "install.WebhookFailurePolicy"),
        ({"vcachebackend": {"failurePolicy": "Ignore"}}, "install.WebhookFailurePolicy"),
        ({"mcachebackend": {"failurePolicy": "Ignore"}}, "install.WebhookFailurePolicy"),
        ({"mpod": {"timeoutSeconds": 30}}, "install.WebhookTimeout"),
        ({"vcachebackend": {"timeoutSeconds": 2}}, "install.WebhookTimeout"),
        ({"mcachebackend": {"timeoutSeconds": 3}}, "install.WebhookTimeout"),
        ({"mpod": {"namespaceSelector": {}}}, "install.WebhookNamespaceSelector"),
        (
            {"vcachebackend": {"namespaceSelector": {"matchLabels": {"team": "a"}}}},
            "install.WebhookNamespaceSelector",
        ),
        (
            {"mcachebackend": {"namespaceSelector": _excluding("team-b")}},
            "install.WebhookNamespaceSelector",
        ),
    ],
)
def test_every_webhook_is_checked_and_each_code_has_one_severity(
    changes: dict[str, dict[str, Any]], code: str
) -> None:
    """The Mutating/ValidatingWebhookConfigurations: failurePolicy, timeoutSeconds and
    namespaceSelector of each of the three webhooks; a code's severity is the one
    docs/doctor.md lists, whichever webhook it is about."""
    (found,) = check_webhook_configs(_configs(**changes), InstallNames())
    assert found.code == code
    assert found.severity == CODES[code][0]
    (name,) = changes
    assert f"{name}.inferencecache.io" in found.message


def test_a_cachebackend_webhook_may_skip_the_install_namespace_and_kube_system() -> None:
    skip = _excluding(InstallNames().namespace, "kube-system")
    configs = _configs(
        mcachebackend={"namespaceSelector": skip}, vcachebackend={"namespaceSelector": skip}
    )
    assert check_webhook_configs(configs, InstallNames()) == []


def test_no_finding_overrides_its_catalogued_severity() -> None:
    """One severity per code: the catalogue (and docs/doctor.md) is the whole truth."""
    import inspect

    from icache_install.doctor import findings

    assert "severity" not in inspect.signature(findings.finding).parameters


# ------------------------------------------------------------ install object names


def test_every_install_object_name_has_a_doctor_flag() -> None:
    """An install made with other names (icache certs --secret, dispatcher --lease-name,
    renamed Deployments) is checked under those names, not reported missing."""
    from icache_cli.main import build_parser

    parser, _, _ = build_parser("doctor")
    args = parser.parse_args(
        [
            "doctor",
            "--install-namespace",
            "ops",
            "--mutating-config",
            "m",
            "--validating-config",
            "v",
            "--tls-secret",
            "tls",
            "--redis-secret",
            "redis",
            "--lease-name",
            "lease",
            "--webhook-deployment",
            "wh",
            "--dispatcher-deployment",
            "disp",
            "--worker-deployment",
            "work",
        ]
    )
    assert install_names(args) == InstallNames(
        namespace="ops",
        mutating_config="m",
        validating_config="v",
        tls_secret="tls",
        redis_secret="redis",
        lease="lease",
        webhook_deployment="wh",
        dispatcher_deployment="disp",
        worker_deployment="work",
    )
    defaults = install_names(parser.parse_args(["doctor"]))
    assert defaults == InstallNames()
