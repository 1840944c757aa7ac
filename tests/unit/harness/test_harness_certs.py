"""The harness's PKI and audit-log parsing, without starting anything."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.harness.controlplane import (
    ADMIN_USER,
    SYSTEM_MASTERS,
    CertificateAuthority,
    ControlPlanePKI,
    audit_log_end,
    read_audit_log,
)


@pytest.fixture(scope="module")
def pki() -> ControlPlanePKI:
    return ControlPlanePKI.generate()


def test_certificates_chain_to_the_ca(pki: ControlPlanePKI) -> None:
    ca = pki.ca.cert
    for pair in (pki.serving, pki.admin):
        pair.cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_serving_certificate_names_loopback(pki: ControlPlanePKI) -> None:
    san = pki.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    eku = pki.serving.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku


def test_admin_client_certificate_is_in_system_masters(pki: ControlPlanePKI) -> None:
    subject = pki.admin.cert.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == ADMIN_USER
    groups = [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert groups == [SYSTEM_MASTERS]
    eku = pki.admin.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku


def test_service_account_key_pair_is_rsa_and_matches(pki: ControlPlanePKI) -> None:
    private = serialization.load_pem_private_key(pki.service_account_key_pem, password=None)
    public = serialization.load_pem_public_key(pki.service_account_pub_pem)
    assert isinstance(private, rsa.RSAPrivateKey)
    assert isinstance(public, rsa.RSAPublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()


def test_keys_load_into_an_ssl_context(pki: ControlPlanePKI, tmp_path: Path) -> None:
    cert_path, key_path = pki.serving.write(tmp_path, "serving")
    assert key_path.stat().st_mode & 0o077 == 0, "private keys are not world readable"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)
    ctx.load_verify_locations(cadata=pki.ca.cert_pem.decode())


def test_ca_issues_certificates_for_other_services() -> None:
    ca = CertificateAuthority("webhook-ca")
    pair = ca.issue_serving(["webhook.ns.svc", "10.1.2.3"])
    san = pair.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["webhook.ns.svc"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    with pytest.raises(ValueError, match="at least one host"):
        ca.issue_serving([])


def _event(verb: str, name: str) -> str:
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": ADMIN_USER, "groups": [SYSTEM_MASTERS]},
            "objectRef": {"resource": "configmaps", "namespace": "ns", "name": name},
            "responseStatus": {"code": 201},
        }
    )


def test_audit_log_reader_stops_at_a_partial_line(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    assert read_audit_log(log) == ([], 0)
    complete = _event("create", "a") + "\n" + _event("get", "a") + "\n"
    log.write_text(complete + _event("patch", "a")[:20])

    events, offset = read_audit_log(log)
    assert [(e.verb, e.name, e.is_write) for e in events] == [
        ("create", "a", True),
        ("get", "a", False),
    ]
    assert offset == len(complete.encode()) == audit_log_end(log)

    log.write_text(complete + _event("patch", "a") + "\n")
    later, _ = read_audit_log(log, offset)
    assert [e.verb for e in later] == ["patch"]
