"""Liveness and readiness of the worker and the dispatcher — the
pure decisions, the HTTP surface (a real server on loopback), and the manifests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from reconciler import metrics as reconciler_metrics
from reconciler.health import Heartbeat, Readiness, serve, stale_beats
from tests.harness.controlplane import free_port

BASE = Path(__file__).resolve().parents[3] / "manifests" / "base"


def test_a_loop_is_stale_once_its_heartbeat_is_older_than_the_bound() -> None:
    beats = {"election-loop": 100.0, "pump": 90.0}
    assert stale_beats(beats, now=105.0, bound=20.0) == []
    assert stale_beats(beats, now=111.0, bound=20.0) == ["pump"]
    assert stale_beats({}, now=1e9, bound=1.0) == []


def test_readiness_is_false_until_checked_and_names_each_failing_dependency() -> None:
    healthy = {"ok": True}

    def redis_check() -> None:
        if not healthy["ok"]:
            raise ConnectionError("refused")

    r = Readiness({"redis": redis_check, "apiserver": lambda: None})
    assert r.state() is None
    assert r.check_once() == {}
    healthy["ok"] = False
    assert r.check_once() == {"redis": "ConnectionError: refused"}


def get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if path != "/metrics" else body
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_health_server_answers_healthz_readyz_and_metrics() -> None:
    heartbeat = Heartbeat()
    heartbeat.beat("consumer-loop")
    readiness = Readiness({"redis": lambda: None})
    port = free_port()
    reconciler_metrics.register_metrics(reconciler_metrics.WORKER)
    server = serve(port, heartbeat, 0.5, readiness)
    try:
        code, body = get(port, "/readyz")
        assert code == 503, "not ready before the first check"
        assert body["ok"] is False, "not ready before the first check"
        readiness.check_once()
        assert get(port, "/readyz")[0] == 200
        assert get(port, "/healthz")[0] == 200
        time.sleep(0.6)  # the bound is what is under test: let it pass
        code, body = get(port, "/healthz")
        assert code == 503
        assert body["stale"] == ["consumer-loop"]
        code, metrics = get(port, "/metrics")
        assert code == 200
        assert b"inferencecache_active_workers" in metrics
    finally:
        server.shutdown()


def test_dispatcher_and_worker_deployments_probe_health_on_the_metrics_port() -> None:
    for name in ("dispatcher", "worker"):
        doc = yaml.safe_load((BASE / f"{name}-deployment.yaml").read_text().split("\n---")[0])
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        assert "--metrics-port=9090" in container["args"]
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9090}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
