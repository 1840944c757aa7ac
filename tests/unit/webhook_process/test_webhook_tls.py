"""The parts of ReloadingTLS that need no socket: a bad reload never
replaces the serving context, and a worker process gets paths, not contexts."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest

from tests.harness.controlplane import CertificateAuthority
from webhook_svc.http.tls import ReloadingTLS


def _tls(tmp_path: Path) -> tuple[ReloadingTLS, CertificateAuthority]:
    ca = CertificateAuthority("unit-tls-ca")
    cert, key = ca.issue_serving(["127.0.0.1"]).write(tmp_path, "tls")
    tls = ReloadingTLS(cert, key, interval=60)
    tls.load()
    return tls, ca


def test_a_refused_reload_keeps_the_serving_context(tmp_path: Path) -> None:
    tls, ca = _tls(tmp_path)
    dispatch = tls.context
    serving = tls._current
    tls.cert.write_bytes(ca.issue_serving(["127.0.0.1"]).cert_pem)  # key no longer matches
    assert tls.check() is False
    assert tls._current is serving
    assert tls.context is dispatch
    tls.key.unlink()
    assert tls.check() is False
    assert tls._current is serving


def test_a_good_pair_swaps_in_a_new_context(tmp_path: Path) -> None:
    tls, ca = _tls(tmp_path)
    dispatch, serving = tls.context, tls._current
    ca.issue_serving(["127.0.0.1"]).write(tmp_path, "tls")
    assert tls.check() is True
    assert tls._current is not serving
    assert tls.context is dispatch
    assert tls.check() is False  # unchanged files: nothing to do


def test_a_worker_process_gets_paths_not_contexts(tmp_path: Path) -> None:
    tls, _ = _tls(tmp_path)
    _ = tls.context
    copy = pickle.loads(pickle.dumps(tls))
    assert (copy.cert, copy.key, copy.interval) == (tls.cert, tls.key, tls.interval)
    assert copy._current is None
    assert copy._dispatch is None
    assert copy.context is not tls.context


def test_a_reload_that_failed_because_the_files_were_deleted_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rule (TLS hot reload): deleted certificate files keep the previous certificate
    serving, and say so in the log once (not on every check), as well as in the
    failed-reload counter."""
    tls, ca = _tls(tmp_path)
    serving = tls._current
    caplog.set_level(logging.WARNING, logger="icache.webhook.tls")
    tls.cert.unlink()
    tls.key.unlink()
    assert tls.check() is False
    assert tls.check() is False
    failed = [r for r in caplog.records if "certificate reload failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]
    assert tls._current is serving
    ca.issue_serving(["127.0.0.1"]).write(tmp_path, "tls")  # restored: reloaded
    assert tls.check() is True


def test_the_expiry_of_the_certificate_in_use_is_reported_on_load_and_reload(
    tmp_path: Path,
) -> None:
    """inferencecache_webhook_certificate_expiry_timestamp_seconds (docs/metrics.md):
    the notAfter of the certificate served now, before and after a rotation; a refused
    reload keeps reporting the certificate still served."""
    import datetime as dt

    from icache_install import certs

    now = dt.datetime.now(dt.UTC)
    ca = certs.new_ca(now, days=30)

    def write(days: int) -> float:
        pair = certs.issue_serving(ca, ["127.0.0.1"], now, days=days)
        (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
        (tmp_path / "tls.key").write_bytes(pair.key_pem)
        return pair.cert.not_valid_after_utc.timestamp()

    first = write(3)
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", interval=60)
    tls.load()
    seen: list[float] = []
    tls.report_expiry_to(seen.append)
    assert seen == [first]
    second = write(10)
    assert tls.check() is True
    assert seen == [first, second]
    (tmp_path / "tls.key").write_bytes(b"not a key")
    assert tls.check() is False
    assert seen == [first, second]
    assert tls.expires_at == second
