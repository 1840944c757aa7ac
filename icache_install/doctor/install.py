"""Install checks: CRD, webhook configurations and certificates, Deployments, Lease,
Redis Secret. Pure functions of the objects read (None: not found) and the time."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from icache_install.doctor.findings import Finding, ObjectRef, finding
from shared import constants as c
from shared.api.crd import CRD_NAME
from shared.api.crd import crd as generated_crd
from shared.objects import meta

EXPIRY_WARNING: Final = dt.timedelta(days=14)
# The Pod webhook must answer well inside its timeout: the live list alone may take
# the webhook's --backend-list-timeout (2 s by default).
MIN_POD_TIMEOUT_SECONDS: Final = 3
MAX_POD_TIMEOUT_SECONDS: Final = 10
# A CacheBackend write may need two SubjectAccessReviews of up to 3 s each.
MIN_BACKEND_TIMEOUT_SECONDS: Final = 7
MAX_TIMEOUT_SECONDS: Final = 30  # the API server's own limit
API_SERVER_DEFAULT_TIMEOUT_SECONDS: Final = 10
NAME_LABEL: Final = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class InstallNames:
    """Where the install's objects are (the defaults of manifests/)."""

    namespace: str = c.INSTALL_NAMESPACE
    mutating_config: str = c.MUTATING_WEBHOOK_CONFIGURATION
    validating_config: str = c.VALIDATING_WEBHOOK_CONFIGURATION
    tls_secret: str = c.WEBHOOK_TLS_SECRET
    redis_secret: str = c.REDIS_AUTH_SECRET
    lease: str = c.DISPATCHER_LEASE
    webhook_deployment: str = c.WEBHOOK_DEPLOYMENT
    dispatcher_deployment: str = c.DISPATCHER_DEPLOYMENT
    worker_deployment: str = c.WORKER_DEPLOYMENT

    @property
    def deployments(self) -> tuple[str, ...]:
        return (self.webhook_deployment, self.dispatcher_deployment, self.worker_deployment)


@dataclass(frozen=True)
class ExpectedWebhook:
    config_kind: str
    name: str
    failure_policy: str
    intercepts_pods: bool


EXPECTED: Final = (
    ExpectedWebhook(
        "MutatingWebhookConfiguration", "mcachebackend.inferencecache.io", "Fail", False
    ),
    ExpectedWebhook("MutatingWebhookConfiguration", "mpod.inferencecache.io", "Ignore", True),
    ExpectedWebhook(
        "ValidatingWebhookConfiguration", "vcachebackend.inferencecache.io", "Fail", False
    ),
)


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _ago(now: dt.datetime, then: dt.datetime) -> str:
    seconds = int((now - then).total_seconds())
    if abs(seconds) < 120:
        return f"{seconds}s"
    if abs(seconds) < 7200:
        return f"{seconds // 60}m"
    if abs(seconds) < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


# ----------------------------------------------------------------------- CRD


def check_crd(crd: Mapping[str, Any] | None) -> list[Finding]:
    ref = ObjectRef("CustomResourceDefinition", CRD_NAME)
    if crd is None:
        return [
            finding(
                "install.CRDMissing",
                ref,
                "the CacheBackend CRD is not installed: kubectl cannot create CacheBackends",
                "kubectl apply -f manifests/crd/inferencecache.io_cachebackends.yaml "
                "(or: icache crd | kubectl apply -f -)",
            )
        ]
    versions = {v.get("name"): v for v in (crd.get("spec") or {}).get("versions") or []}
    ours = versions.get(c.VERSION)
    if ours is None or not ours.get("served") or not ours.get("storage"):
        served = ", ".join(sorted(str(v) for v in versions)) or "none"
        return [
            finding(
                "install.CRDVersionNotServed",
                ref,
                f"the CRD does not serve and store {c.VERSION} (versions: {served}): this binary "
                f"speaks {c.API_VERSION}",
                "apply the CRD of this release: icache crd | kubectl apply -f -",
            )
        ]
    expected = generated_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    if (ours.get("schema") or {}).get("openAPIV3Schema") != expected:
        return [
            finding(
                "install.CRDSchemaDrift",
                ref,
                f"the installed CRD's {c.VERSION} schema differs from this binary's: the CRD and "
                "the processes are from different releases",
                "upgrade both to one release: icache crd | kubectl apply -f - (after upgrading "
                "icache), then roll the install's Deployments",
            )
        ]
    return []


# ------------------------------------------------------------------- webhooks


def _selector_excludes(selector: Mapping[str, Any] | None, namespaces: Sequence[str]) -> list[str]:
    """The namespaces of ``namespaces`` the selector does NOT exclude."""
    excluded: set[str] = set()
    for expr in (selector or {}).get("matchExpressions") or []:
        if expr.get("key") == NAME_LABEL and expr.get("operator") == "NotIn":
            excluded |= set(expr.get("values") or [])
    return [ns for ns in namespaces if ns not in excluded]


def _webhook_ref(config_kind: str, config_name: str) -> ObjectRef:
    return ObjectRef(config_kind, config_name)


def check_webhook_configs(
    configs: Mapping[str, Mapping[str, Any] | None], names: InstallNames
) -> list[Finding]:
    """``configs``: kind -> the configuration (None: not found)."""
    out: list[Finding] = []
    config_names = {
        "MutatingWebhookConfiguration": names.mutating_config,
        "ValidatingWebhookConfiguration": names.validating_config,
    }
    for kind, config in configs.items():
        if config is None:
            out.append(
                finding(
                    "install.WebhookConfigMissing",
                    _webhook_ref(kind, config_names[kind]),
                    f"the {kind} is missing: "
                    + (
                        "engine pods are not wired and CacheBackends are not defaulted"
                        if kind.startswith("Mutating")
                        else "CacheBackends are not validated"
                    ),
                    "kubectl apply -k manifests/ (or icache manifests | kubectl apply -f -), then "
                    "icache certs",
                )
            )
    for expected in EXPECTED:
        config = configs.get(expected.config_kind)
        if config is None:
            continue
        ref = _webhook_ref(expected.config_kind, config_names[expected.config_kind])
        hooks = {h.get("name"): h for h in config.get("webhooks") or []}
        hook = hooks.get(expected.name)
        if hook is None:
            out.append(
                finding(
                    "install.WebhookMissing",
                    ref,
                    f"webhook {expected.name} is missing from the configuration",
                    "re-apply the install manifests",
                    webhook=expected.name,
                )
            )
            continue
        out += _check_webhook(expected, hook, ref, names)
    return out


def _check_webhook(
    expected: ExpectedWebhook, hook: Mapping[str, Any], ref: ObjectRef, names: InstallNames
) -> list[Finding]:
    out: list[Finding] = []
    policy = hook.get("failurePolicy", "Fail")
    if policy != expected.failure_policy:
        why = (
            "a Pod webhook that fails closed blocks every engine pod whenever the webhook is down"
            if expected.intercepts_pods
            else "CacheBackends are stored undefaulted and unvalidated whenever the webhook is down"
        )
        out.append(
            finding(
                "install.WebhookFailurePolicy",
                ref,
                f"webhook {expected.name} has failurePolicy {policy}, not "
                f"{expected.failure_policy}: {why}",
                f"set failurePolicy: {expected.failure_policy} (re-apply the install manifests)",
                webhook=expected.name,
            )
        )
    out += _check_timeout(expected, hook.get("timeoutSeconds"), ref)
    out += _check_namespace_selector(expected, hook.get("namespaceSelector"), ref, names)
    return out


def _check_timeout(expected: ExpectedWebhook, timeout: Any, ref: ObjectRef) -> list[Finding]:
    if expected.intercepts_pods:
        low, high, install_value = MIN_POD_TIMEOUT_SECONDS, MAX_POD_TIMEOUT_SECONDS, 5
        why = (
            f"it must leave the webhook time for its CacheBackend list (>= {low}s) and not hold "
            f"pod creation long (<= {high}s; the install sets {install_value})"
        )
    else:
        low, high, install_value = MIN_BACKEND_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, 10
        why = (
            f"a CacheBackend write may wait for two 3 s access reviews (>= {low}s; the install "
            f"sets {install_value})"
        )
    # Unset is the API server's default, 10 s (a stored v1 configuration always has it).
    effective = API_SERVER_DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    if isinstance(effective, int) and low <= effective <= high:
        return []
    shown = f"unset (the API server's {effective}s)" if timeout is None else f"{timeout}s"
    return [
        finding(
            "install.WebhookTimeout",
            ref,
            f"webhook {expected.name} has timeoutSeconds {shown}: {why}",
            f"set timeoutSeconds: {install_value}",
            webhook=expected.name,
        )
    ]


def _check_namespace_selector(
    expected: ExpectedWebhook, selector: Any, ref: ObjectRef, names: InstallNames
) -> list[Finding]:
    skippable = [names.namespace, "kube-system"]
    if expected.intercepts_pods:
        missing = _selector_excludes(selector, skippable)
        if not missing:
            return []
        return [
            finding(
                "install.WebhookNamespaceSelector",
                ref,
                f"webhook {expected.name}'s namespaceSelector does not exclude "
                f"{', '.join(missing)}: the webhook's own pods and system pods go through it",
                f"add to namespaceSelector.matchExpressions: {{key: {NAME_LABEL}, operator: "
                f"NotIn, values: [{names.namespace}, kube-system]}}",
                webhook=expected.name,
            )
        ]
    # A CacheBackend webhook needs no selector (its own pods are not CacheBackends); one
    # may skip the install namespace and kube-system, but anything narrower lets the
    # CacheBackends of the namespaces it leaves out past defaulting and validation.
    if _selects_all_but(selector, skippable):
        return []
    return [
        finding(
            "install.WebhookNamespaceSelector",
            ref,
            f"webhook {expected.name}'s namespaceSelector leaves namespaces out: their "
            "CacheBackends are stored undefaulted and unvalidated",
            "remove the namespaceSelector (re-apply the install manifests); at most exclude "
            f"{names.namespace} and kube-system",
            webhook=expected.name,
        )
    ]


def _selects_all_but(selector: Any, allowed: Sequence[str]) -> bool:
    """Whether ``selector`` selects every namespace except, at most, ``allowed``: absent,
    empty, or only ``kubernetes.io/metadata.name NotIn`` a subset of ``allowed``."""
    if not selector:
        return True
    if not isinstance(selector, Mapping) or selector.get("matchLabels"):
        return False
    for expr in selector.get("matchExpressions") or []:
        if not (
            isinstance(expr, Mapping)
            and expr.get("key") == NAME_LABEL
            and expr.get("operator") == "NotIn"
            and set(expr.get("values") or []) <= set(allowed)
        ):
            return False
    return True


# --------------------------------------------------------------- certificates


def _pem_certs(data: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data)


def _hosts_called(hook: Mapping[str, Any]) -> str | None:
    client = hook.get("clientConfig") or {}
    service = client.get("service")
    if isinstance(service, Mapping):
        return f"{service.get('name')}.{service.get('namespace')}.svc"
    url = client.get("url")
    return urlsplit(url).hostname if isinstance(url, str) else None


def _names_host(cert: x509.Certificate, host: str) -> bool:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in sans.get_values_for_type(x509.DNSName)
    return address in sans.get_values_for_type(x509.IPAddress)


def _issued_by(
    cert: x509.Certificate, issuers: Sequence[x509.Certificate]
) -> x509.Certificate | None:
    for issuer in issuers:
        try:
            cert.verify_directly_issued_by(issuer)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return issuer
    return None


def check_certificates(
    configs: Mapping[str, Mapping[str, Any] | None],
    tls_secret: Mapping[str, Any] | None,
    names: InstallNames,
    now: dt.datetime,
) -> list[Finding]:
    """caBundle parses, verifies the serving certificate in the Secret, is not expiring;
    the serving certificate is valid and names the host the API server calls."""
    secret_ref = ObjectRef("Secret", names.tls_secret, names.namespace)
    out: list[Finding] = []
    serving: x509.Certificate | None = None
    if tls_secret is None:
        out.append(
            finding(
                "install.ServingCertMissing",
                secret_ref,
                "the webhook's TLS Secret is missing: the webhook pods cannot start",
                "icache certs (or install cert-manager and the cert-manager overlay)",
            )
        )
    else:
        raw = (tls_secret.get("data") or {}).get("tls.crt", "")
        try:
            chain = _pem_certs(base64.b64decode(raw, validate=True))
            serving = chain[0]
        except (ValueError, binascii.Error, IndexError):
            out.append(
                finding(
                    "install.ServingCertInvalid",
                    secret_ref,
                    "the TLS Secret's tls.crt is not a PEM certificate",
                    "icache certs --renew",
                )
            )
    if serving is not None:
        out += _expiry(
            serving.not_valid_after_utc,
            now,
            secret_ref,
            "install.ServingCertExpired",
            "install.ServingCertExpiring",
            "the serving certificate",
            "icache certs --renew (or check cert-manager's Certificate)",
        )
    for expected in EXPECTED:
        config = configs.get(expected.config_kind)
        if config is None:
            continue
        config_name = meta(config).name
        ref = _webhook_ref(expected.config_kind, config_name)
        hook = next(
            (h for h in config.get("webhooks") or [] if h.get("name") == expected.name), None
        )
        if hook is None:
            continue
        out += _check_bundle(expected.name, hook, ref, serving, now)
    return out


def _expiry(
    not_after: dt.datetime,
    now: dt.datetime,
    ref: ObjectRef,
    expired_code: str,
    expiring_code: str,
    what: str,
    next_step: str,
    **details: Any,
) -> list[Finding]:
    if not_after <= now:
        return [
            finding(
                expired_code,
                ref,
                f"{what} expired {_ago(now, not_after)} ago ({not_after:%Y-%m-%d})",
                next_step,
                notAfter=not_after.isoformat(),
                **details,
            )
        ]
    if not_after - now < EXPIRY_WARNING:
        return [
            finding(
                expiring_code,
                ref,
                f"{what} expires in {_ago(not_after, now)} ({not_after:%Y-%m-%d}), within 14 days",
                next_step,
                notAfter=not_after.isoformat(),
                **details,
            )
        ]
    return []


def _check_bundle(
    webhook: str,
    hook: Mapping[str, Any],
    ref: ObjectRef,
    serving: x509.Certificate | None,
    now: dt.datetime,
) -> list[Finding]:
    raw = (hook.get("clientConfig") or {}).get("caBundle")
    if not raw:
        return [
            finding(
                "install.CABundleMissing",
                ref,
                f"webhook {webhook} has no caBundle: the API server cannot call it",
                "icache certs (patches caBundle), or check cert-manager's CA injector",
                webhook=webhook,
            )
        ]
    try:
        bundle = _pem_certs(base64.b64decode(raw, validate=True))
    except (ValueError, binascii.Error):
        bundle = []
    if not bundle:
        return [
            finding(
                "install.CABundleInvalid",
                ref,
                f"webhook {webhook}'s caBundle is not base64 PEM certificates",
                "icache certs",
                webhook=webhook,
            )
        ]
    out: list[Finding] = []
    issuer = _issued_by(serving, bundle) if serving is not None else None
    if serving is not None and issuer is None:
        out.append(
            finding(
                "install.CABundleMismatch",
                ref,
                f"webhook {webhook}'s caBundle does not verify the serving certificate in the "
                "Secret: the API server refuses the webhook's TLS",
                "icache certs (re-patches caBundle from the stored CA)",
                webhook=webhook,
            )
        )
    # The CA that matters: the one that issued the serving certificate, else the
    # longest-lived of the bundle.
    ca = issuer or max(bundle, key=lambda cert: cert.not_valid_after_utc)
    out += _expiry(
        ca.not_valid_after_utc,
        now,
        ref,
        "install.CABundleExpired",
        "install.CABundleExpiring",
        f"the CA in webhook {webhook}'s caBundle",
        "icache certs --rotate-ca",
        webhook=webhook,
    )
    host = _hosts_called(hook)
    if serving is not None and host and not _names_host(serving, host):
        out.append(
            finding(
                "install.ServingCertHostMismatch",
                ref,
                f"the serving certificate does not name {host}, the host the API server calls "
                f"for {webhook}",
                "icache certs --renew (with --url-base/--hosts for a webhook outside the cluster)",
                webhook=webhook,
                host=host,
            )
        )
    return out


# -------------------------------------------------------- Deployments, Lease, Redis


def _condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def available_since(deployment: Mapping[str, Any] | None) -> dt.datetime | None:
    """When the Deployment last became Available (None: not available, or not known)."""
    if deployment is None:
        return None
    cond = _condition(deployment, "Available")
    if cond is None or cond.get("status") != "True":
        return None
    return _time(cond.get("lastTransitionTime"))


def check_deployments(
    deployments: Mapping[str, Mapping[str, Any] | None], names: InstallNames
) -> list[Finding]:
    out: list[Finding] = []
    roles = {
        names.webhook_deployment: "the admission webhooks (engine pods are admitted unwired)",
        names.dispatcher_deployment: "the dispatcher (nothing is reconciled)",
        names.worker_deployment: "the reconcile workers (nothing is reconciled)",
    }
    for name, deployment in deployments.items():
        ref = ObjectRef("Deployment", name, names.namespace)
        if deployment is None:
            out.append(
                finding(
                    "install.DeploymentMissing",
                    ref,
                    f"Deployment {name} is missing: no {roles.get(name, name)}",
                    "re-apply the install manifests (kubectl apply -k manifests/)",
                )
            )
            continue
        status = deployment.get("status") or {}
        available = int(status.get("availableReplicas") or 0)
        wanted = (deployment.get("spec") or {}).get("replicas", 1)
        cond = _condition(deployment, "Available")
        if available < 1 or (cond is not None and cond.get("status") != "True"):
            why = (cond or {}).get("message") or f"{available}/{wanted} replicas available"
            out.append(
                finding(
                    "install.DeploymentUnavailable",
                    ref,
                    f"Deployment {name} is not available ({why}): {roles.get(name, name)}",
                    f"kubectl -n {names.namespace} describe deployment {name}; read its pods' "
                    "events and logs",
                    availableReplicas=available,
                    replicas=wanted,
                )
            )
    return out


LEASE_MARGIN: Final = dt.timedelta(seconds=2)


def check_leader_lease(
    lease: Mapping[str, Any] | None, names: InstallNames, now: dt.datetime
) -> list[Finding]:
    ref = ObjectRef("Lease", names.lease, names.namespace)
    next_step = (
        f"kubectl -n {names.namespace} logs deployment/{names.dispatcher_deployment}: a "
        "dispatcher that cannot reach the API server or Redis does not lead"
    )
    if lease is None:
        return [
            finding(
                "install.LeaseMissing",
                ref,
                "no dispatcher has ever taken the leader Lease: CacheBackends are not reconciled",
                next_step,
            )
        ]
    spec = lease.get("spec") or {}
    renewed = _time(spec.get("renewTime")) or _time(spec.get("acquireTime"))
    duration = dt.timedelta(seconds=float(spec.get("leaseDurationSeconds") or 15))
    holder = spec.get("holderIdentity") or "nobody"
    if renewed is None or now - renewed > duration + LEASE_MARGIN:
        when = f"{_ago(now, renewed)} ago" if renewed else "never"
        return [
            finding(
                "install.LeaseStale",
                ref,
                f"the leader Lease was last renewed {when} by {holder} (it lasts "
                f"{int(duration.total_seconds())}s): no dispatcher is leading, CacheBackends "
                "are not reconciled",
                next_step,
                holder=holder,
                renewTime=spec.get("renewTime"),
            )
        ]
    return []


def check_redis_secret(exists: bool, names: InstallNames) -> list[Finding]:
    if exists or not names.redis_secret:
        return []
    return [
        finding(
            "install.RedisSecretMissing",
            ObjectRef("Secret", names.redis_secret, names.namespace),
            "the Redis password Secret is missing: the bundled Redis, the dispatcher and the "
            "workers cannot start",
            "icache certs (creates it with a random password), or point --redis-secret at your own",
        )
    ]
