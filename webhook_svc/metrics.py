"""Prometheus metrics of the webhook service (served on /metrics).

Each app (``create_app``) owns a :class:`WebhookMetrics` on its own registry, so
/metrics shows that app's traffic only and two apps in one process (tests) never
share counters. A registry the app creates itself also carries ``process_*`` and
``python_*``; with several worker processes those describe the whole replica
(webhook_svc/http/process_metrics.py).
"""

from __future__ import annotations

import os
from typing import Any, Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from shared.pod_wiring import (
    OUTCOME_FAIL_OPEN,
    OUTCOME_INJECTED,
    OUTCOME_SKIPPED,
    REASON_EVENTS_ONLY,
    REASON_INJECTED,
    REASON_SKIP_INJECT,
)
from webhook_svc.http.process_metrics import ReplicaProcessCollector, start_gc_flusher
from webhook_svc.pod_admission import ADMISSION_REASONS, REASON_NOT_CREATE

# No `<name>_created` series beside every counter and histogram (as the reconciler):
# Prometheus does not read them from the text format.
disable_created_metrics()


# The label values every counter below can take. Each child is created at zero when
# the metrics are built: a labelled series otherwise appears only on its first
# increment, so with several workers (whose /metrics shows only what a worker wrote)
# it is missing from the scrape, and rate() misses that first increment.
# The admission routes (webhook_svc/app.py; a unit test keeps the two lists equal).
ADMISSION_ENDPOINTS: Final = (
    "/mutate-inferencecache-io-v1alpha1-cachebackend",
    "/validate-inferencecache-io-v1alpha1-cachebackend",
    "/mutate--v1-pod",
)
POD_ENDPOINT: Final = "/mutate--v1-pod"
# An answer whose judging raised is counted "error" on every route.
OUTCOME_ERROR: Final = "error"
CACHEBACKEND_OUTCOMES: Final = ("allowed", "patched", "denied", OUTCOME_ERROR)
POD_OUTCOMES: Final = (OUTCOME_INJECTED, OUTCOME_SKIPPED, OUTCOME_FAIL_OPEN, OUTCOME_ERROR)
# The reasons of a 400/408/413 (webhook_svc/http/codec.py BadBodyError, webhook_svc/app.py).
BAD_REQUEST_REASONS: Final = ("malformed", "too_deep", "too_large", "timeout")
TLS_RELOAD_RESULTS: Final = ("reloaded", "failed")
_INJECTED_REASONS: Final = frozenset({REASON_INJECTED, REASON_EVENTS_ONLY})
_SKIPPED_REASONS: Final = frozenset({REASON_SKIP_INJECT, REASON_NOT_CREATE})


def pod_decision_labels() -> tuple[tuple[str, str], ...]:
    """Every (outcome, reason) the Pod route can count: the wired reasons are
    ``injected``, the opted-out and non-CREATE ones ``skipped``, the rest
    ``fail_open``."""

    def outcome(reason: str) -> str:
        if reason in _INJECTED_REASONS:
            return OUTCOME_INJECTED
        if reason in _SKIPPED_REASONS:
            return OUTCOME_SKIPPED
        return OUTCOME_FAIL_OPEN

    return tuple((outcome(reason), reason) for reason in ADMISSION_REASONS)


def multiprocess() -> bool:
    """Whether the metrics of several worker processes are shared (webhook_svc.http.uvicorn_processes)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        own_registry = registry is None
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.admissions = Counter(
            "inferencecache_webhook_admissions_total",
            "AdmissionReviews answered, by endpoint and outcome.",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.admission_latency = Histogram(
            "inferencecache_webhook_admission_duration_seconds",
            "Time to answer one AdmissionReview, by endpoint.",
            ["endpoint"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.pod_wiring = Counter(
            "inferencecache_pod_webhook_decisions_total",
            "Pod webhook decisions: outcome (injected, skipped, fail_open) and reason.",
            ["outcome", "reason"],
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "inferencecache_webhook_bad_requests_total",
            "Requests rejected with HTTP 400/408/413 before admission (malformed, slow or "
            "oversized bodies).",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self.tls_reloads = Counter(
            "inferencecache_webhook_tls_reloads_total",
            "Serving-certificate reload attempts after the files changed: reloaded, or "
            "failed (the previous certificate keeps serving).",
            ["result"],
            registry=self.registry,
        )
        self.overloaded = Counter(
            "inferencecache_webhook_overloaded_total",
            "Admission requests answered 503 (Retry-After) because the webhook was at "
            "capacity: the in-flight body budget stayed full, or every request slot "
            "(--limit-concurrency) was taken.",
            ["endpoint"],
            registry=self.registry,
        )
        self.internal_errors = Counter(
            "inferencecache_webhook_internal_errors_total",
            "Admission requests answered 503 (Retry-After) because answering failed "
            "unexpectedly (a bug: the log has the traceback).",
            ["endpoint"],
            registry=self.registry,
        )
        # Created on the first certificate loaded: absent (not 0) with --insecure.
        self.certificate_expiry: Gauge | None = None
        self._admitted: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.inflight_bytes = Gauge(
            "inferencecache_webhook_inflight_body_bytes",
            "Body bytes reserved by admission requests being read, decoded or judged.",
            registry=self.registry,
            # With several workers: the sum over the live ones (ignored with one process).
            multiprocess_mode="livesum",
        )

        self._create_children()

        if own_registry:
            if multiprocess():
                start_gc_flusher()  # python_gc_* of this worker, into the shared files
            else:
                ProcessCollector(registry=self.registry)
                PlatformCollector(registry=self.registry)
                GCCollector(registry=self.registry)

    def _create_children(self) -> None:
        """Every known label child, at zero (see ADMISSION_ENDPOINTS)."""
        for endpoint in ADMISSION_ENDPOINTS:
            outcomes = POD_OUTCOMES if endpoint == POD_ENDPOINT else CACHEBACKEND_OUTCOMES
            for outcome in outcomes:
                self.admissions.labels(endpoint, outcome)
            self.admission_latency.labels(endpoint)
            for reason in BAD_REQUEST_REASONS:
                self.bad_requests.labels(endpoint, reason)
            self.overloaded.labels(endpoint)
            self.internal_errors.labels(endpoint)
        for outcome, reason in pod_decision_labels():
            self.pod_wiring.labels(outcome, reason)
        for result in TLS_RELOAD_RESULTS:
            self.tls_reloads.labels(result)

    def failed(self, endpoint: str) -> None:
        """An admission request answered 503 because answering it raised."""
        self.internal_errors.labels(endpoint).inc()

    def admitted(self, endpoint: str, outcome: str, seconds: float) -> None:
        """One answered AdmissionReview. The labelled children are looked up once per
        (endpoint, outcome): ``labels()`` takes a lock and validates every call."""
        key = (endpoint, outcome)
        children = self._admitted.get(key)
        if children is None:
            children = (
                self.admissions.labels(endpoint, outcome),
                self.admission_latency.labels(endpoint),
            )
            self._admitted[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def certificate_expires_at(self, timestamp: float) -> None:
        """The serving certificate now in use expires at ``timestamp`` (Unix seconds)."""
        if self.certificate_expiry is None:
            self.certificate_expiry = Gauge(
                "inferencecache_webhook_certificate_expiry_timestamp_seconds",
                "When the serving certificate in use expires (notAfter, Unix seconds); "
                "with several workers the earliest any of them serves. Absent with "
                "--insecure.",
                registry=self.registry,
                multiprocess_mode="min",
            )
        self.certificate_expiry.set(timestamp)

    def exposition_registry(self) -> CollectorRegistry:
        """What /metrics renders: this app's registry, or with several webhook workers
        (webhook_svc.http.uvicorn_processes) the values of every worker, summed."""
        if not multiprocess():
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(ReplicaProcessCollector())
        PlatformCollector(registry=registry)
        return registry
