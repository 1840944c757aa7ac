"""process_* and python_* of the webhook (docs/metrics.md): one process exposes
prometheus_client's standard collectors; with several workers, process_* describe the
replica (supervisor + workers, combined) and python_gc_* are counters summed over the
workers through the multiprocess files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from webhook_svc.http.process_metrics import ReplicaProcessCollector, children_of, combine
from webhook_svc.metrics import WebhookMetrics


def _names(registry: CollectorRegistry) -> set[str]:
    return {s.name for family in registry.collect() for s in family.samples}


def test_a_single_process_webhook_exposes_process_and_python_series() -> None:
    names = _names(WebhookMetrics().exposition_registry())
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"} <= names
    assert "python_gc_collections_total" in names


def test_a_registry_given_by_the_caller_gets_no_process_collectors() -> None:
    registry = CollectorRegistry()
    WebhookMetrics(registry)
    assert not any(n.startswith(("process_", "python_")) for n in _names(registry))


def test_combine_sums_usage_and_keeps_the_earliest_start_and_lowest_fd_limit() -> None:
    def process(cpu: float, rss: float, start: float, max_fds: float) -> list[Metric]:
        return [
            CounterMetricFamily("process_cpu_seconds", "cpu", value=cpu),
            GaugeMetricFamily("process_resident_memory_bytes", "rss", value=rss),
            GaugeMetricFamily("process_start_time_seconds", "start", value=start),
            GaugeMetricFamily("process_max_fds", "fds", value=max_fds),
        ]

    merged = combine([process(1.5, 100, 50, 1024), process(2.0, 300, 40, 4096)])
    values = {s.name: s.value for family in merged for s in family.samples}
    assert values == {
        "process_cpu_seconds_total": 3.5,
        "process_resident_memory_bytes": 400,
        "process_start_time_seconds": 40,
        "process_max_fds": 1024,
    }
    assert {family.type for family in merged if family.name == "process_cpu_seconds"} == {"counter"}


def test_the_replica_collector_reads_every_listed_process() -> None:
    alone = {
        s.name: s.value
        for f in ReplicaProcessCollector(lambda: [os.getpid()]).collect()
        for s in f.samples
    }
    twice = {
        s.name: s.value
        for f in ReplicaProcessCollector(lambda: [os.getpid(), os.getpid()]).collect()
        for s in f.samples
    }
    assert twice["process_open_fds"] >= 2 * alone["process_open_fds"] - 2
    assert twice["process_start_time_seconds"] == alone["process_start_time_seconds"]


def test_children_of_reads_the_children_file_or_scans_proc(tmp_path: Path) -> None:
    """The kernel's /proc/PID/task/PID/children when it has one, else every
    /proc/N/stat whose parent field is PID."""
    (tmp_path / "7" / "task" / "7").mkdir(parents=True)
    (tmp_path / "7" / "task" / "7" / "children").write_text("8 9 ")
    assert children_of(7, proc=tmp_path) == [8, 9]
    for pid, parent in ((20, 10), (21, 10), (22, 3)):
        (tmp_path / str(pid)).mkdir()
        # The command may hold spaces and parentheses: fields count from the last ')'.
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (icache (w) x) S {parent} 1 1\n")
    (tmp_path / "self").mkdir()
    assert children_of(10, proc=tmp_path) == [20, 21]


@pytest.mark.services
def test_multiprocess_gc_counters_are_summed_over_workers(tmp_path: Path) -> None:
    """Two workers flush their collections into the shared files; a third answers the
    scrape with their sum (each in its own interpreter: prometheus_client picks its
    multiprocess value store at import)."""
    flush = (
        "import gc, sys\n"
        "from webhook_svc.metrics import WebhookMetrics\n"
        "from webhook_svc.http.process_metrics import start_gc_flusher\n"
        "WebhookMetrics()\n"
        "for _ in range(int(sys.argv[1])): gc.collect()\n"
        "start_gc_flusher().flush()\n"
    )
    scrape = (
        "from prometheus_client import generate_latest\n"
        "from webhook_svc.metrics import WebhookMetrics\n"
        "print(generate_latest(WebhookMetrics().exposition_registry()).decode())\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def run(code: str, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
        ).stdout

    run(flush, "2")
    run(flush, "1")
    out = run(scrape)
    gen2 = [
        float(line.split()[-1])
        for line in out.splitlines()
        if line.startswith('python_gc_collections_total{generation="2"}')
    ]
    assert gen2, out
    assert gen2[0] >= 3, out
    assert "process_cpu_seconds_total" in out
    assert "python_info{" in out
