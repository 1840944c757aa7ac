"""Serving TLS whose certificate can be rotated without an outage.

The listening socket gets one *dispatch* SSLContext whose SNI callback, which OpenSSL
runs for every ClientHello (with or without a server name), points the handshake at
the current *serving* context. A reload builds and validates a brand-new serving
context off to the side (``load_cert_chain`` rejects a missing, truncated or
half-written file and a key that does not match the certificate) and only then swaps
the reference, one atomic assignment. A failed reload leaves the previous certificate
serving, logs the error and counts it in
``inferencecache_webhook_tls_reloads_total{result="failed"}``; it is retried on the
next check, so the second half of a non-atomic cert+key write is picked up. The
expiry of the certificate in use is reported to a callback (the app's
``inferencecache_webhook_certificate_expiry_timestamp_seconds``) on every load.

The object itself is uvicorn's ``ssl_context_factory``: contexts are built and the
watcher thread started in the process that serves, so every worker process of a
multi-process server has its own.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from prometheus_client import Counter

from shared.stop_signal import StopSignal

log = logging.getLogger("icache.webhook.tls")

Stamp = tuple[tuple[int, int, int], ...]
_NEVER = object()


def not_after(cert: Path) -> float | None:
    """When the first certificate in the PEM file expires (Unix seconds); None when it
    cannot be read or parsed (the TLS load itself reports that)."""
    try:
        return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return None


def _serving_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


class ReloadingTLS(StopSignal):
    """The serving certificate, re-read every ``interval`` seconds when the files change."""

    def __init__(self, cert: Path, key: Path, interval: float) -> None:
        self._reset(cert, key, interval)

    def _reset(self, cert: Path, key: Path, interval: float) -> None:
        self.cert, self.key, self.interval = cert, key, interval
        self._current: ssl.SSLContext | None = None
        self._stamp: Stamp | None = None
        # The file state of the last failed reload, logged once; _NEVER before any.
        self._failed_stamp: Stamp | object | None = _NEVER
        self._dispatch: ssl.SSLContext | None = None
        self._stop = threading.Event()
        self._started = False
        # The serving app's reload counter (its own registry); set by the caller.
        self.reloads: Counter | None = None
        self._expiry_sink: Callable[[float], None] | None = None
        self.expires_at: float | None = None

    def report_expiry_to(self, sink: Callable[[float], None]) -> None:
        """Call ``sink`` with the expiry of the certificate in use: now (for the one
        already loaded) and after every reload."""
        self._expiry_sink = sink
        self._report_expiry()

    def _loaded(self) -> None:
        self.expires_at = not_after(self.cert)
        self._report_expiry()

    def _report_expiry(self) -> None:
        if self._expiry_sink is not None and self.expires_at is not None:
            self._expiry_sink(self.expires_at)

    def _count(self, result: str) -> None:
        if self.reloads is not None:
            self.reloads.labels(result).inc()

    def __getstate__(self) -> dict[str, Any]:
        # A worker process gets the paths, not this process's contexts or thread.
        return {"cert": self.cert, "key": self.key, "interval": self.interval}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._reset(state["cert"], state["key"], state["interval"])

    def _current_stamp(self) -> Stamp:
        # Inode and size too: an atomic rename keeps mtimes that can compare equal, and a
        # truncate-then-write can land within one coarse mtime tick.
        stats = (self.cert.stat(), self.key.stat())
        return tuple((st.st_ino, st.st_mtime_ns, st.st_size) for st in stats)

    def load(self) -> ssl.SSLContext:
        """Load the files now (raises if they are unusable): the startup check."""
        stamp = self._current_stamp()
        self._current = _serving_context(self.cert, self.key)
        self._stamp = stamp
        self._loaded()
        return self._current

    @property
    def context(self) -> ssl.SSLContext:
        """The context to listen with: hands each handshake the current certificate."""
        if self._dispatch is None:
            serving = self._current or self.load()
            # The dispatch context carries a chain too, so it can never serve nothing.
            dispatch = _serving_context(self.cert, self.key)
            dispatch.sni_callback = self._select
            self._dispatch = dispatch
            self._current = serving
        return self._dispatch

    def _select(self, ssl_object: Any, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        current = self._current
        if current is not None and ssl_object.context is not current:
            ssl_object.context = current

    def check(self) -> bool:
        """Swap in a new certificate when the files changed and form a valid pair."""
        try:
            stamp = self._current_stamp()
            if stamp == self._stamp:
                return False
            fresh = _serving_context(self.cert, self.key)
        except (OSError, ssl.SSLError, ValueError) as exc:
            self._count("failed")
            stamp_now = self._safe_stamp()  # None: the files are gone
            if stamp_now != self._failed_stamp:  # once per file state, not every interval
                self._failed_stamp = stamp_now
                log.warning(
                    "certificate reload failed; still serving the previous certificate",
                    extra={"cert": str(self.cert), "key": str(self.key), "error": str(exc)},
                )
            return False
        self._current = fresh
        self._stamp = stamp
        self._failed_stamp = _NEVER
        self._loaded()
        self._count("reloaded")
        log.info("reloaded serving certificate", extra={"cert": str(self.cert)})
        return True

    def _safe_stamp(self) -> Stamp | None:
        try:
            return self._current_stamp()
        except OSError:
            return None

    def start(self) -> None:
        """Check the files every ``interval`` seconds on a daemon thread (once)."""
        if self._started:
            return
        self._started = True

        def loop() -> None:
            while not self._stop.wait(self.interval):
                self.check()

        threading.Thread(target=loop, name="tls-reload", daemon=True).start()

    def __call__(
        self, _config: Any, _default: Callable[[], ssl.SSLContext] | None = None
    ) -> ssl.SSLContext:
        """uvicorn's ``ssl_context_factory``: runs in the serving process."""
        context = self.context
        self.start()
        return context
