"""The pure certificate logic behind `icache certs` (icache_install/certs.py)."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from typing import Any

import jsonpatch
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from icache_install import certs

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HOSTS = certs.service_hosts("inference-cache-webhook", "inference-cache-system")


def _handshake(serving: certs.KeyPair, bundle: bytes, server_name: str, tmp_path: Any) -> None:
    """A real TLS handshake in memory: the client trusts only ``bundle``."""
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(serving.cert_pem)
    key_file.write_bytes(serving.key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_file, key_file)
    client_ctx = ssl.create_default_context(cadata=bundle.decode())
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=server_name)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not complete")


def _fresh(**kwargs: Any) -> certs.Plan:
    args: dict[str, Any] = {
        "ca": None,
        "serving": None,
        "previous_ca_pem": None,
        "hosts": HOSTS,
        "now": NOW,
    }
    args.update(kwargs)
    return certs.plan(**args)


def _again(previous: certs.Plan, **kwargs: Any) -> certs.Plan:
    state = previous.state
    return _fresh(
        ca=state.ca, serving=state.serving, previous_ca_pem=state.previous_ca_pem, **kwargs
    )


# --------------------------------------------------------------------------- names and URLs


def test_service_hosts_are_the_four_in_cluster_names() -> None:
    assert certs.service_hosts("svc", "ns") == [
        "svc",
        "svc.ns",
        "svc.ns.svc",
        "svc.ns.svc.cluster.local",
    ]
    assert certs.service_hosts("svc", "ns", "corp.local")[-1] == "svc.ns.svc.corp.local"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://127.0.0.1:9443", "https://127.0.0.1:9443"),
        ("https://127.0.0.1:9443/", "https://127.0.0.1:9443"),
        ("https://dev.example:9443/prefix/", "https://dev.example:9443/prefix"),
    ],
)
def test_url_base_is_normalised(url: str, expected: str) -> None:
    assert certs.normalise_url_base(url) == expected


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9443", "https://", "https://h:1/?q=1", "https://u:p@h:1"]
)
def test_url_base_must_be_plain_https(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        certs.normalise_url_base(url)


def test_url_host_strips_ipv6_brackets() -> None:
    assert certs.url_host("https://[::1]:9443") == "::1"
    assert certs.url_host("https://127.0.0.1:9443") == "127.0.0.1"


# --------------------------------------------------------------------------- issuing


def test_new_ca_is_a_ca_that_cannot_sign_intermediates() -> None:
    ca = certs.new_ca(NOW, days=10).cert
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    assert constraints.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign
    assert ca.not_valid_after_utc == NOW + dt.timedelta(days=10)


def test_serving_certificate_covers_dns_names_and_ips_and_is_server_auth() -> None:
    ca = certs.new_ca(NOW)
    serving = certs.issue_serving(ca, ["svc.ns.svc", "127.0.0.1", "::1"], NOW, days=30).cert
    assert certs.certificate_hosts(serving) == {"svc.ns.svc", "127.0.0.1", "::1"}
    eku = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not serving.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    serving.verify_directly_issued_by(ca.cert)
    assert serving.not_valid_after_utc == NOW + dt.timedelta(days=30)


def test_serving_certificate_never_outlives_its_ca() -> None:
    ca = certs.new_ca(NOW, days=10)
    serving = certs.issue_serving(ca, ["h"], NOW, days=365).cert
    assert serving.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_issuing_needs_hosts_and_a_positive_validity() -> None:
    ca = certs.new_ca(NOW)
    with pytest.raises(ValueError, match="at least one host"):
        certs.issue_serving(ca, [], NOW)
    with pytest.raises(ValueError, match="at least one day"):
        certs.issue_serving(ca, ["h"], NOW, days=0)
    with pytest.raises(ValueError, match="at least one day"):
        certs.new_ca(NOW, days=0)


def test_a_client_trusting_the_bundle_completes_a_tls_handshake(tmp_path: Any) -> None:
    state = _fresh().state
    _handshake(
        state.serving,
        certs.ca_bundle(state),
        "inference-cache-webhook.inference-cache-system.svc",
        tmp_path,
    )


def test_the_handshake_fails_for_a_name_not_in_the_certificate(tmp_path: Any) -> None:
    state = _fresh().state
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(state.serving, certs.ca_bundle(state), "other.example", tmp_path)


# --------------------------------------------------------------------------- the plan


def test_first_run_creates_a_ca_and_a_serving_certificate() -> None:
    first = _fresh()
    assert first.changed
    assert first.ca_reason == "no CA stored yet"
    assert first.serving_reason == "no serving certificate stored yet"
    assert first.state.previous_ca_pem is None
    assert certs.certificate_hosts(first.state.serving.cert) == set(HOSTS)


def test_second_run_keeps_everything() -> None:
    first = _fresh()
    second = _again(first, now=NOW + dt.timedelta(days=100))
    assert not second.changed
    assert second.state == first.state


def test_serving_certificate_is_reissued_inside_30_days_of_expiry_with_the_same_ca() -> None:
    first = _fresh(days=365)
    not_yet = _again(first, now=NOW + dt.timedelta(days=334))
    assert not not_yet.changed
    renewed = _again(first, now=NOW + dt.timedelta(days=336))
    assert renewed.serving_reason
    assert "expires" in renewed.serving_reason
    assert renewed.ca_reason is None
    assert renewed.state.ca == first.state.ca
    assert renewed.state.serving != first.state.serving


def test_short_lived_certificates_renew_at_a_third_of_their_lifetime() -> None:
    """A 3-day certificate is not re-issued on every run (30 days > its lifetime)."""
    first = _fresh(days=3)
    assert certs.renew_before(first.state.serving.cert) < dt.timedelta(days=1.1)
    assert not _again(first, now=NOW + dt.timedelta(days=1)).changed
    assert _again(first, now=NOW + dt.timedelta(days=2.5)).serving_reason


def test_renew_reissues_the_serving_certificate_only() -> None:
    first = _fresh()
    renewed = _again(first, renew=True)
    assert renewed.serving_reason == "re-issue requested (--renew)"
    assert renewed.ca_reason is None
    assert renewed.state.ca == first.state.ca


def test_new_hosts_reissue_the_serving_certificate() -> None:
    first = _fresh()
    moved = _again(first, hosts=[*HOSTS, "127.0.0.1"])
    assert moved.serving_reason == "serving certificate does not cover 127.0.0.1"
    assert "127.0.0.1" in certs.certificate_hosts(moved.state.serving.cert)


def test_a_serving_certificate_from_another_ca_is_replaced() -> None:
    first = _fresh()
    foreign = _fresh().state.serving
    fixed = _fresh(ca=first.state.ca, serving=foreign)
    assert fixed.serving_reason == "serving certificate was not issued by the current CA"
    fixed.state.serving.cert.verify_directly_issued_by(first.state.ca.cert)


def test_a_serving_key_that_does_not_match_is_replaced() -> None:
    first = _fresh()
    other = _fresh().state.serving
    mixed = certs.KeyPair(first.state.serving.cert_pem, other.key_pem)
    fixed = _fresh(ca=first.state.ca, serving=mixed)
    assert fixed.serving_reason == "serving key does not match the serving certificate"


def test_unreadable_stored_material_is_replaced() -> None:
    broken = certs.KeyPair(b"not a pem", b"not a key")
    fixed = _fresh(ca=broken, serving=broken)
    assert fixed.ca_reason
    assert "unreadable" in fixed.ca_reason
    assert fixed.serving_reason
    fixed.state.serving.cert.verify_directly_issued_by(fixed.state.ca.cert)


def test_a_leaf_certificate_is_not_accepted_as_the_ca() -> None:
    serving = _fresh().state.serving
    assert certs.ca_problem(serving, NOW) == "stored CA certificate is not a CA"


def test_rotate_ca_keeps_the_old_ca_in_the_bundle_until_dropped(tmp_path: Any) -> None:
    first = _fresh()
    rotated = _again(first, rotate_ca=True)
    assert rotated.ca_reason == "rotation requested (--rotate-ca)"
    assert rotated.state.ca != first.state.ca
    assert rotated.serving_reason == "serving certificate was not issued by the current CA"
    assert rotated.state.previous_ca_pem == first.state.ca.cert_pem
    bundle = certs.ca_bundle(rotated.state)
    # Pods still serving the old certificate stay trusted, and so do the new ones.
    _handshake(first.state.serving, bundle, HOSTS[2], tmp_path)
    _handshake(rotated.state.serving, bundle, HOSTS[2], tmp_path)
    # Idempotent after the rotation too.
    assert not _again(rotated).changed
    dropped = _again(rotated, drop_previous_ca=True)
    assert dropped.previous_ca_reason == "previous CA dropped from the bundle"
    assert certs.ca_bundle(dropped.state) == rotated.state.ca.cert_pem
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(first.state.serving, certs.ca_bundle(dropped.state), HOSTS[2], tmp_path)


def test_an_expiring_ca_is_rotated_automatically() -> None:
    first = _fresh(ca_days=90, days=30)
    later = _again(first, now=NOW + dt.timedelta(days=61))
    assert later.ca_reason
    assert "expires" in later.ca_reason
    assert later.state.previous_ca_pem == first.state.ca.cert_pem


def test_an_explicit_renewal_window_renews_both_with_overlap_and_nothing_outside_it(
    tmp_path: Any,
) -> None:
    """`icache certs --renew-before`: inside the window the CA rotates (the old one
    kept in the bundle) and the serving certificate is re-issued; outside it nothing
    changes, so the rotation CronJob can run daily."""
    now = dt.datetime.now(dt.UTC)  # the handshakes below check validity at the real time
    first = _fresh(ca_days=60, days=30, now=now)
    outside = _again(first, renew_within=dt.timedelta(days=20), now=now + dt.timedelta(days=5))
    assert not outside.changed
    inside = _again(first, renew_within=dt.timedelta(days=90), days=365, ca_days=3650, now=now)
    assert inside.ca_reason
    assert "expires" in inside.ca_reason
    assert inside.serving_reason
    assert inside.state.previous_ca_pem == first.state.ca.cert_pem
    bundle = certs.ca_bundle(inside.state)
    _handshake(first.state.serving, bundle, HOSTS[2], tmp_path)  # old pods still trusted
    _handshake(inside.state.serving, bundle, HOSTS[2], tmp_path)
    again = _again(inside, renew_within=dt.timedelta(days=90), now=now)
    assert not again.changed, "a fresh certificate is not due again"


def test_an_expired_previous_ca_leaves_the_bundle() -> None:
    first = _fresh(ca_days=90, days=30)
    rotated = _again(first, rotate_ca=True)
    after = _again(rotated, now=NOW + dt.timedelta(days=91))
    assert after.state.previous_ca_pem is None
    assert after.previous_ca_reason == "previous CA dropped from the bundle"


# --------------------------------------------------------------------------- Secrets


def test_secret_data_round_trips() -> None:
    state = _fresh().state
    tls = certs.tls_secret_data(state)
    assert set(tls) == {"tls.crt", "tls.key", "ca.crt"}
    assert certs.pair_from_secret_data(tls, "tls.crt", "tls.key") == state.serving
    ca = certs.ca_secret_data(state)
    assert set(ca) == {"ca.crt", "ca.key"}
    assert certs.pair_from_secret_data(ca, "ca.crt", "ca.key") == state.ca
    assert certs.previous_ca_from_secret_data(ca) is None


def test_the_ca_key_never_goes_into_the_tls_secret() -> None:
    state = _fresh().state
    values = [base64.b64decode(v) for v in certs.tls_secret_data(state).values()]
    assert state.ca.key_pem not in values


def test_missing_or_undecodable_secret_data_reads_as_absent() -> None:
    assert certs.pair_from_secret_data(None, "tls.crt", "tls.key") is None
    assert (
        certs.pair_from_secret_data({"tls.crt": "!!!", "tls.key": "AA=="}, "tls.crt", "tls.key")
        is None
    )
    assert certs.pair_from_secret_data({"tls.crt": "AA=="}, "tls.crt", "tls.key") is None


# --------------------------------------------------------------------------- webhooks


def _config() -> dict[str, Any]:
    return {
        "kind": "MutatingWebhookConfiguration",
        "webhooks": [
            {
                "name": "mcachebackend.inferencecache.io",
                "clientConfig": {
                    "service": {
                        "name": "inference-cache-webhook",
                        "namespace": "inference-cache-system",
                        "path": "/mutate-inferencecache-io-v1alpha1-cachebackend",
                        "port": 443,
                    }
                },
            },
            {
                "name": "mpod.inferencecache.io",
                "clientConfig": {
                    "service": {
                        "name": "inference-cache-webhook",
                        "namespace": "inference-cache-system",
                        "path": "/mutate--v1-pod",
                    }
                },
            },
        ],
    }


def test_webhook_patch_sets_the_bundle_on_every_webhook_and_keeps_the_service() -> None:
    config = _config()
    ops = certs.webhook_patch(config, b"PEM")
    patched = jsonpatch.apply_patch(config, ops)
    for before, after in zip(config["webhooks"], patched["webhooks"], strict=True):
        assert after["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
        assert after["clientConfig"]["service"] == before["clientConfig"]["service"]
    assert certs.webhook_patch(patched, b"PEM") == []


def test_webhook_patch_in_url_mode_points_each_webhook_at_its_path() -> None:
    config = _config()
    patched = jsonpatch.apply_patch(
        config, certs.webhook_patch(config, b"PEM", "https://127.0.0.1:9443")
    )
    urls = [w["clientConfig"]["url"] for w in patched["webhooks"]]
    assert urls == [
        "https://127.0.0.1:9443/mutate-inferencecache-io-v1alpha1-cachebackend",
        "https://127.0.0.1:9443/mutate--v1-pod",
    ]
    assert all("service" not in w["clientConfig"] for w in patched["webhooks"])
    assert certs.webhook_patch(patched, b"PEM", "https://127.0.0.1:9443") == []
    # A new port is a change; the path survives the round trip through URL form.
    again = jsonpatch.apply_patch(
        patched, certs.webhook_patch(patched, b"PEM", "https://127.0.0.1:9555")
    )
    assert again["webhooks"][1]["clientConfig"]["url"] == "https://127.0.0.1:9555/mutate--v1-pod"


def test_webhook_patch_guards_each_write_with_the_webhook_name() -> None:
    config = _config()
    ops = certs.webhook_patch(config, b"PEM")
    assert ops[0] == {
        "op": "test",
        "path": "/webhooks/0/name",
        "value": "mcachebackend.inferencecache.io",
    }
    config["webhooks"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(config, ops)


# --------------------------------------------------------------------------- --renew-before


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("720h", 720 * 3600), ("30d", 30 * 86400), ("1d12h", 36 * 3600), ("90m", 5400)],
)
def test_renew_before_reads_durations(text: str, seconds: int) -> None:
    from icache_install.certs_cli import duration

    assert duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "0h", "3 d", "1w", "30d "])
def test_renew_before_refuses_what_is_not_a_positive_duration(text: str) -> None:
    import argparse

    from icache_install.certs_cli import duration

    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


def test_a_window_as_long_as_the_validity_is_refused_before_any_api_call() -> None:
    """Every certificate issued would be due at once: each run would rotate."""
    from icache_install.certs_cli import parse_and_run

    assert parse_and_run(["--renew-before", "400d", "--kubeconfig", "/nonexistent"]) == 1
