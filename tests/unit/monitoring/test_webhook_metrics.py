"""The webhook's labelled series exist from the start (docs/metrics.md "Webhook"), and
an admission request answered 503 because answering raised is counted.

Every label child whose values are known (each admission route with each outcome and
each 400/408/413 reason, overload and internal-error 503s per route, TLS reload
results, every Pod decision) is created at zero when the metrics are built: with
several workers /metrics shows only what some worker wrote, so a series created on
first increment is missing from a scrape of a healthy replica, and the alerts' rate()
misses its first increment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import webhook_svc.app as webhook_app
from shared.runtime_adapters.base import InjectContext
from tests.fakes import raise_unexpected
from tests.samples import SAMPLES_DIR
from webhook_svc.app import PATH_MUTATE_CB, PATH_MUTATE_POD, PATH_VALIDATE_CB, create_app
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource
from webhook_svc.metrics import (
    ADMISSION_ENDPOINTS,
    BAD_REQUEST_REASONS,
    POD_ENDPOINT,
    TLS_RELOAD_RESULTS,
    pod_decision_labels,
)
from webhook_svc.pod_admission import ADMISSION_REASONS

ROUTES = (PATH_MUTATE_CB, PATH_VALIDATE_CB, PATH_MUTATE_POD)


def _client() -> TestClient:
    return TestClient(create_app(FileBackendSource(SAMPLES_DIR, load_backends), InjectContext()))


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _expected_zeros() -> list[tuple[str, dict[str, str]]]:
    wanted: list[tuple[str, dict[str, str]]] = []
    for endpoint in ROUTES:
        wanted.append(("inferencecache_webhook_overloaded_total", {"endpoint": endpoint}))
        wanted.append(("inferencecache_webhook_internal_errors_total", {"endpoint": endpoint}))
        wanted.append(
            ("inferencecache_webhook_admission_duration_seconds_count", {"endpoint": endpoint})
        )
        for reason in BAD_REQUEST_REASONS:
            wanted.append(
                (
                    "inferencecache_webhook_bad_requests_total",
                    {"endpoint": endpoint, "reason": reason},
                )
            )
        outcomes = (
            ("injected", "skipped", "fail_open", "error")
            if endpoint == PATH_MUTATE_POD
            else ("allowed", "patched", "denied", "error")
        )
        for outcome in outcomes:
            wanted.append(
                (
                    "inferencecache_webhook_admissions_total",
                    {"endpoint": endpoint, "outcome": outcome},
                )
            )
    for result in ("reloaded", "failed"):
        wanted.append(("inferencecache_webhook_tls_reloads_total", {"result": result}))
    for outcome, reason in pod_decision_labels():
        wanted.append(
            ("inferencecache_pod_webhook_decisions_total", {"outcome": outcome, "reason": reason})
        )
    return wanted


def test_the_metric_label_values_name_the_apps_routes() -> None:
    assert set(ADMISSION_ENDPOINTS) == set(ROUTES)
    assert POD_ENDPOINT == PATH_MUTATE_POD
    assert set(TLS_RELOAD_RESULTS) == {"reloaded", "failed"}


def test_every_pod_reason_has_one_outcome() -> None:
    """Wired reasons are injected, the opt-out and non-CREATE ones skipped, every other
    reason (no_match included) a fail-open."""
    decisions = dict((reason, outcome) for outcome, reason in pod_decision_labels())
    assert set(decisions) == set(ADMISSION_REASONS)
    assert decisions["injected"] == decisions["events_only"] == "injected"
    assert decisions["skip_inject_annotation"] == decisions["operation_not_create"] == "skipped"
    assert decisions["no_match"] == decisions["list_error"] == "fail_open"
    assert decisions["internal_error"] == "fail_open"


def test_a_fresh_app_exposes_every_known_label_child_at_zero() -> None:
    samples = _samples(_client().get("/metrics").text)
    missing = [
        (name, labels)
        for name, labels in _expected_zeros()
        if samples.get((name, frozenset(labels.items()))) != 0.0
    ]
    assert not missing, missing


@pytest.mark.services
def test_with_several_workers_the_zero_children_reach_the_scrape(tmp_path: Path) -> None:
    """Multiprocess mode (webhook --workers N): a worker that has answered nothing still
    writes its zero children into the shared files, so the replica's /metrics carries
    them (each in its own interpreter: prometheus_client picks its value store at
    import)."""
    build = "from webhook_svc.metrics import WebhookMetrics\nWebhookMetrics()\n"
    scrape = (
        "from prometheus_client import generate_latest\n"
        "from webhook_svc.metrics import WebhookMetrics\n"
        "print(generate_latest(WebhookMetrics().exposition_registry()).decode())\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def run(code: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout

    run(build)
    samples = _samples(run(scrape))
    missing = [
        (name, labels)
        for name, labels in _expected_zeros()
        if samples.get((name, frozenset(labels.items()))) != 0.0
    ]
    assert not missing, missing


@pytest.mark.parametrize("path", ROUTES)
def test_an_unexpected_error_answers_503_and_is_counted(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """No path returns a 500: an exception outside the route's judge answers 503 +
    Retry-After, and inferencecache_webhook_internal_errors_total{endpoint} counts it
    (the "webhook 503" alert reads it beside overloaded_total)."""

    monkeypatch.setattr(webhook_app, "parse_body", raise_unexpected)
    client = _client()
    response = client.post(path, content=b"{}", headers={"Content-Type": "application/json"})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    samples = _samples(client.get("/metrics").text)
    key = ("inferencecache_webhook_internal_errors_total", frozenset({("endpoint", path)}))
    assert samples[key] == 1.0
    overloaded = ("inferencecache_webhook_overloaded_total", frozenset({("endpoint", path)}))
    assert samples[overloaded] == 0.0
