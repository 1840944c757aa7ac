"""Webhook certificates without cert-manager: the pure part.

Everything here is a function of plain data (PEM bytes, names, a clock value), so
``icache certs`` (``icache_install/certs_cli.py``) only reads Secrets, calls :func:`plan`,
and writes back what changed. The rules:

* A CA is reused while it is a usable CA: it parses, is a CA, its key matches, and
  it is not inside its renewal window. ``rotate_ca`` forces a new one.
* The serving certificate is re-issued when it is missing or unreadable, does not
  match its key, was not issued by the current CA, does not cover every requested
  host, is inside its renewal window, or when ``renew`` asks for it.
* The renewal window of a certificate is 30 days, or a third of its lifetime when
  that is shorter (a 3-day test certificate is not re-issued on every run); an
  explicit window (``renew_within``, ``--renew-before``) replaces both.
* When the CA changes, the previous CA stays in the ``caBundle`` until it expires
  (or ``drop_previous_ca``), so webhook pods still serving the old certificate stay
  trusted until the Secret volume update reaches them.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

RENEW_BEFORE: Final = dt.timedelta(days=30)
DEFAULT_SERVING_DAYS: Final = 365
DEFAULT_CA_DAYS: Final = 3650
CA_COMMON_NAME: Final = "inference-cache-webhook-ca"
# Certificates are back-dated a little so a node with a slow clock accepts them.
CLOCK_SKEW: Final = dt.timedelta(minutes=5)

# Keys of the two Secrets.
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"
CA_CERT: Final = "ca.crt"
CA_KEY: Final = "ca.key"
PREVIOUS_CA_CERT: Final = "previous-ca.crt"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class CertState:
    """What the two Secrets hold: the CA (with key), the serving pair, and the CA
    that was replaced last (certificate only) while it is still trusted."""

    ca: KeyPair
    serving: KeyPair
    previous_ca_pem: bytes | None = None


@dataclass(frozen=True)
class Plan:
    """The state to store, and why each part changed (``None``: kept as it was)."""

    state: CertState
    ca_reason: str | None
    serving_reason: str | None
    previous_ca_reason: str | None = None

    @property
    def changed(self) -> bool:
        return any((self.ca_reason, self.serving_reason, self.previous_ca_reason))


# --------------------------------------------------------------------------- names


def service_hosts(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The DNS names a Service answers to from inside the cluster."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def url_host(url_base: str) -> str:
    """The host of ``https://host:port`` (brackets of an IPv6 literal removed)."""
    host = urlsplit(url_base).hostname
    if not host:
        raise ValueError(f"no host in URL {url_base!r}")
    return host


def normalise_url_base(url_base: str) -> str:
    """``https://host[:port][/prefix]`` without a trailing slash; anything else is an error."""
    parts = urlsplit(url_base)
    if parts.scheme != "https":
        raise ValueError(f"webhook URL must use https (the API server requires it): {url_base!r}")
    if not parts.hostname:
        raise ValueError(f"no host in URL {url_base!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"webhook URL may not carry a query, fragment or user info: {url_base!r}")
    return url_base.rstrip("/")


def san_entries(hosts: Iterable[str]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return entries


def certificate_hosts(cert: x509.Certificate) -> set[str]:
    """DNS names and IP addresses in the certificate's subjectAltName."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    hosts = set(san.get_values_for_type(x509.DNSName))
    hosts.update(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    return hosts


# --------------------------------------------------------------------------- issuing


def pem_key(key: PrivateKeyTypes) -> bytes:
    """The key as unencrypted PKCS#8 PEM (what Kubernetes TLS Secrets hold)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _load_ec_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        # Every key this module writes is P-256; a foreign key means a foreign Secret.
        raise ValueError(f"expected an EC private key, got {type(key).__name__}")
    return key


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(
    now: dt.datetime, *, days: int = DEFAULT_CA_DAYS, common_name: str = CA_COMMON_NAME
) -> KeyPair:
    """A self-signed P-256 CA valid for ``days``."""
    if days < 1:
        raise ValueError("CA validity must be at least one day")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(pem_cert(cert), pem_key(key))


def issue_serving(
    ca: KeyPair, hosts: Sequence[str], now: dt.datetime, *, days: int = DEFAULT_SERVING_DAYS
) -> KeyPair:
    """A P-256 TLS server certificate for ``hosts`` (DNS names or IPs), signed by ``ca``.

    It never outlives the CA: a chain with an expired root is rejected anyway, and
    ending together makes the renewal window catch both.
    """
    if not hosts:
        raise ValueError("a serving certificate needs at least one host")
    if days < 1:
        raise ValueError("serving certificate validity must be at least one day")
    ca_cert = ca.cert
    ca_key = _load_ec_key(ca.key_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(san_entries(hosts)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(pem_cert(cert), pem_key(key))


# --------------------------------------------------------------------------- checks


def renew_before(cert: x509.Certificate, window: dt.timedelta | None = None) -> dt.timedelta:
    """How long before its expiry a certificate is renewed: ``window`` when given,
    else 30 days, or a third of the certificate's lifetime when that is shorter."""
    if window is not None:
        return window
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return min(RENEW_BEFORE, lifetime / 3)


def expiring(cert: x509.Certificate, now: dt.datetime, window: dt.timedelta | None = None) -> bool:
    """Whether ``cert`` is inside its renewal window at ``now``."""
    return now >= cert.not_valid_after_utc - renew_before(cert, window)


def _key_matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    public = _load_ec_key(key_pem).public_key()
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*fmt) == public.public_bytes(*fmt)


def _usable_pair(
    pair: KeyPair, mismatch: str, unreadable: str
) -> tuple[x509.Certificate | None, str | None]:
    """The pair's certificate, or (None, why it cannot be used): unreadable, or its key
    does not match it."""
    try:
        cert = pair.cert
        if not _key_matches(cert, pair.key_pem):
            return None, mismatch
    except ValueError as exc:
        return None, f"{unreadable} ({exc})"
    return cert, None


def ca_problem(
    ca: KeyPair | None, now: dt.datetime, renew_within: dt.timedelta | None = None
) -> str | None:
    """Why ``ca`` cannot be reused (``None``: it can)."""
    if ca is None:
        return "no CA stored yet"
    cert, problem = _usable_pair(
        ca, "stored CA key does not match the CA certificate", "stored CA is unreadable"
    )
    if cert is None:
        return problem
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return "stored CA certificate is not a CA"
    if not constraints.ca:
        return "stored CA certificate is not a CA"
    if now < cert.not_valid_before_utc:
        return "stored CA is not valid yet"
    if expiring(cert, now, renew_within):
        return f"stored CA expires {cert.not_valid_after_utc.isoformat()}"
    return None


def serving_problem(
    serving: KeyPair | None,
    ca: KeyPair,
    hosts: Sequence[str],
    now: dt.datetime,
    renew_within: dt.timedelta | None = None,
) -> str | None:
    """Why ``serving`` must be re-issued (``None``: it can stay)."""
    if serving is None:
        return "no serving certificate stored yet"
    cert, problem = _usable_pair(
        serving,
        "serving key does not match the serving certificate",
        "stored serving certificate is unreadable",
    )
    if cert is None:
        return problem
    try:
        cert.verify_directly_issued_by(ca.cert)
    except (ValueError, TypeError, InvalidSignature):
        return "serving certificate was not issued by the current CA"
    missing = set(hosts) - certificate_hosts(cert)
    if missing:
        return f"serving certificate does not cover {', '.join(sorted(missing))}"
    if now < cert.not_valid_before_utc:
        return "serving certificate is not valid yet"
    if expiring(cert, now, renew_within):
        return f"serving certificate expires {cert.not_valid_after_utc.isoformat()}"
    return None


def _still_valid(cert_pem: bytes | None, now: dt.datetime) -> bool:
    if not cert_pem:
        return False
    try:
        return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc > now
    except ValueError:
        return False


# --------------------------------------------------------------------------- the plan


def plan(
    *,
    ca: KeyPair | None,
    serving: KeyPair | None,
    previous_ca_pem: bytes | None,
    hosts: Sequence[str],
    now: dt.datetime,
    rotate_ca: bool = False,
    renew: bool = False,
    drop_previous_ca: bool = False,
    days: int = DEFAULT_SERVING_DAYS,
    ca_days: int = DEFAULT_CA_DAYS,
    renew_within: dt.timedelta | None = None,
) -> Plan:
    """Decide what the Secrets should hold, reusing whatever is still good.
    ``renew_within``: renew a certificate this long before it expires (default: the
    window of :func:`renew_before`)."""
    ca_reason = (
        "rotation requested (--rotate-ca)" if rotate_ca else ca_problem(ca, now, renew_within)
    )
    previous = previous_ca_pem if _still_valid(previous_ca_pem, now) else None
    if ca_reason is not None:
        # Keep trusting the CA being replaced while pods may still serve its certificates.
        if ca is not None and _still_valid(ca.cert_pem, now):
            previous = ca.cert_pem
        ca = new_ca(now, days=ca_days)
    assert ca is not None
    if drop_previous_ca:
        previous = None
    previous_reason = None
    if previous != (previous_ca_pem or None):
        previous_reason = (
            "previous CA kept in the bundle until pods pick up the new certificate"
            if previous
            else "previous CA dropped from the bundle"
        )
    serving_reason = (
        "re-issue requested (--renew)"
        if renew
        else serving_problem(serving, ca, hosts, now, renew_within)
    )
    if serving_reason is not None:
        serving = issue_serving(ca, hosts, now, days=days)
    assert serving is not None
    return Plan(CertState(ca, serving, previous), ca_reason, serving_reason, previous_reason)


def ca_bundle(state: CertState) -> bytes:
    """The PEM bundle the API server trusts: the current CA, then the previous one."""
    bundle = state.ca.cert_pem
    if state.previous_ca_pem:
        bundle = bundle.rstrip(b"\n") + b"\n" + state.previous_ca_pem
    return bundle


# --------------------------------------------------------------------------- Secrets


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def tls_secret_data(state: CertState) -> dict[str, str]:
    """``data`` of the kubernetes.io/tls Secret the webhook pods mount."""
    return {
        TLS_CERT: _b64(state.serving.cert_pem),
        TLS_KEY: _b64(state.serving.key_pem),
        CA_CERT: _b64(ca_bundle(state)),
    }


def ca_secret_data(state: CertState) -> dict[str, str]:
    """``data`` of the Opaque Secret that keeps the CA key away from the webhook pods."""
    data = {CA_CERT: _b64(state.ca.cert_pem), CA_KEY: _b64(state.ca.key_pem)}
    if state.previous_ca_pem:
        data[PREVIOUS_CA_CERT] = _b64(state.previous_ca_pem)
    return data


def _decoded(data: Mapping[str, str] | None, key: str) -> bytes | None:
    if not data or not data.get(key):
        return None
    try:
        return base64.b64decode(data[key], validate=True)
    except ValueError:
        return None


def pair_from_secret_data(
    data: Mapping[str, str] | None, cert_key: str, key_key: str
) -> KeyPair | None:
    """The pair stored under ``cert_key``/``key_key`` of a Secret's ``data`` (or ``None``)."""
    cert, key = _decoded(data, cert_key), _decoded(data, key_key)
    if cert is None or key is None:
        return None
    return KeyPair(cert, key)


def previous_ca_from_secret_data(data: Mapping[str, str] | None) -> bytes | None:
    return _decoded(data, PREVIOUS_CA_CERT)


# --------------------------------------------------------------------------- webhooks


def webhook_patch(
    config: Mapping[str, Any], bundle: bytes, url_base: str | None = None
) -> list[dict[str, Any]]:
    """JSON-patch operations that set ``caBundle`` on every webhook of a
    Mutating/ValidatingWebhookConfiguration and, with ``url_base``, point each one at
    ``url_base + <its path>`` instead of the Service. Empty when nothing would change.

    Each write is guarded by a ``test`` of the webhook's name, so a configuration
    edited concurrently (entries reordered) is refused rather than mis-patched.
    """
    encoded = _b64(bundle)
    ops: list[dict[str, Any]] = []
    for index, webhook in enumerate(config.get("webhooks") or []):
        current = webhook.get("clientConfig") or {}
        wanted = dict(current)
        if url_base is not None:
            wanted = {"url": url_base + webhook_path(current)}
        wanted["caBundle"] = encoded
        if wanted == current:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]})
        ops.append({"op": "replace", "path": f"/webhooks/{index}/clientConfig", "value": wanted})
    return ops


def webhook_path(client_config: Mapping[str, Any]) -> str:
    """The request path of a webhook clientConfig (Service or URL form)."""
    service = client_config.get("service")
    if service is not None:
        return str(service.get("path") or "/")
    url = client_config.get("url")
    if url:
        return urlsplit(str(url)).path or "/"
    raise ValueError("webhook clientConfig has neither service nor url")
