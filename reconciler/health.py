"""Liveness and readiness of the worker and the dispatcher, on the metrics port.

* ``/healthz`` (liveness): 200 while every heartbeat of the process's main loop is
  fresher than the bound — the dispatcher's election loop (and its pump while it
  leads), the worker's Celery consumer loop. A loop that stopped making progress
  turns it 503, and the kubelet restarts the container.
* ``/readyz`` (readiness): 200 once the latest background check reached both Redis
  and the API server, 503 before the first check and whenever one fails. Checked in
  the background, so a probe never waits on a dead Redis.
* ``/metrics``: the process's Prometheus metrics, on the same port.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from shared.stop_signal import StopSignal

log = logging.getLogger(__name__)

DEFAULT_LIVENESS_TIMEOUT = 60.0

Beats = Callable[[], Mapping[str, float]]
Check = Callable[[], object]


def stale_beats(beats: Mapping[str, float], now: float, bound: float) -> list[str]:
    """The loops (by name) whose last heartbeat (time.monotonic()) is older than
    ``bound`` seconds; empty means alive."""
    return sorted(name for name, beat in beats.items() if now - beat > bound)


class Heartbeat:
    """A named set of loop heartbeats, beaten from the loops themselves."""

    def __init__(self) -> None:
        self._beats: dict[str, float] = {}
        self._lock = threading.Lock()

    def beat(self, name: str) -> None:
        with self._lock:
            self._beats[name] = time.monotonic()

    def forget(self, name: str) -> None:
        with self._lock:
            self._beats.pop(name, None)

    def __call__(self) -> dict[str, float]:
        with self._lock:
            return dict(self._beats)


class Readiness(StopSignal):
    """Runs every check each ``interval`` seconds in a thread; ready when the latest
    round passed them all."""

    def __init__(self, checks: Mapping[str, Check], interval: float = 5.0) -> None:
        self.checks = dict(checks)
        self.interval = interval
        self._failures: dict[str, str] | None = None  # None: not checked yet
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def check_once(self) -> dict[str, str]:
        failures: dict[str, str] = {}
        for name, check in self.checks.items():
            try:
                check()
            except Exception as exc:
                failures[name] = f"{type(exc).__name__}: {exc}"[:300]
        with self._lock:
            if failures != self._failures:
                log.info("readiness changed", extra={"ready": not failures, "failures": failures})
            self._failures = failures
        return failures

    def state(self) -> dict[str, str] | None:
        with self._lock:
            return None if self._failures is None else dict(self._failures)

    def start(self) -> Readiness:
        def run() -> None:
            while not self._stop.is_set():
                self.check_once()
                self._stop.wait(self.interval)

        threading.Thread(target=run, name="icache-readiness", daemon=True).start()
        return self


def liveness_report(beats: Beats, bound: float) -> tuple[bool, dict[str, Any]]:
    now = time.monotonic()
    current = beats()
    stale = stale_beats(current, now, bound)
    ages = {name: round(now - beat, 1) for name, beat in current.items()}
    return not stale, {"stale": stale, "ages": ages, "bound": bound}


def readiness_report(readiness: Readiness) -> tuple[bool, dict[str, Any]]:
    failures = readiness.state()
    if failures is None:
        return False, {"failures": {"*": "not checked yet"}}
    return not failures, {"failures": failures}


def serve(port: int, beats: Beats, bound: float, readiness: Readiness) -> ThreadingHTTPServer:
    """Serve /healthz, /readyz and /metrics on ``port`` (all interfaces) in a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
                return
            if path in ("/healthz", "/livez"):
                ok, detail = liveness_report(beats, bound)
            elif path == "/readyz":
                ok, detail = readiness_report(readiness)
            else:
                self._send(404, b"not found\n", "text/plain")
                return
            body = json.dumps({"ok": ok, **detail}).encode() + b"\n"
            self._send(200 if ok else 503, body, "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: ARG002 (override)
            return  # probes every few seconds: not worth a log line each

    server = ThreadingHTTPServer(("", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="icache-health", daemon=True).start()
    return server
