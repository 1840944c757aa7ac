"""``process_*`` and ``python_*`` for a webhook of several worker processes.

prometheus_client's process and GC collectors describe the one process that answers
the scrape. With ``--workers N`` that is whichever worker the kernel handed the
connection to, so consecutive scrapes would see different processes and every
counter would jump. Instead, in multiprocess mode:

* ``process_*`` describe the replica: the supervisor and every worker, read from
  /proc at scrape time. CPU seconds, memory and open descriptors are summed; the
  start time is the earliest (the supervisor's) and the descriptor limit the lowest.
* ``python_gc_*`` are counters summed over the workers: each worker adds what its
  collector did since the previous flush into prometheus_client's multiprocess
  files, from a small thread every few seconds. Not from ``gc.callbacks``: a
  collection can start while the multiprocess value lock is held, and the callback
  would then wait on that lock forever.
* ``python_info`` is the interpreter's, the same in every worker.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

GC_FLUSH_SECONDS: Final = 2.0

# How samples of the same process_* series from several processes combine.
_COMBINE: Final[dict[str, Callable[[Iterable[float]], float]]] = {
    "process_start_time_seconds": min,
    "process_max_fds": min,
}


def children_of(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The child processes of ``pid`` (its workers, for the supervisor)."""
    children_file = proc / str(pid) / "task" / str(pid) / "children"
    try:
        return [int(p) for p in children_file.read_text().split()]
    except (OSError, ValueError):
        pass
    found: list[int] = []  # kernels without /proc/PID/task/PID/children: scan /proc
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid).encode():
            found.append(int(entry.name))
    return sorted(found)


def replica_pids() -> list[int]:
    """This worker's supervisor and every worker it forked (this one included)."""
    supervisor = os.getppid()
    return [supervisor, *children_of(supervisor)]


def combine(per_process: Iterable[Iterable[Metric]]) -> list[Metric]:
    """One family per process_* name, its value combined over the processes."""
    values: dict[str, list[float]] = {}
    kinds: dict[str, tuple[str, str]] = {}
    for families in per_process:
        for family in families:
            for sample in family.samples:
                values.setdefault(sample.name, []).append(sample.value)
                kinds[sample.name] = (family.type, family.documentation)
    out: list[Metric] = []
    for name, samples in values.items():
        kind, documentation = kinds[name]
        value = _COMBINE.get(name, sum)(samples)
        if kind == "counter":
            out.append(CounterMetricFamily(name.removesuffix("_total"), documentation, value=value))
        else:
            out.append(GaugeMetricFamily(name, documentation, value=value))
    return out


class ReplicaProcessCollector(Collector):
    """``process_*`` of the supervisor and all its workers, combined (module docstring)."""

    def __init__(self, pids: Callable[[], list[int]] = replica_pids) -> None:
        self._pids = pids
        self._collectors: dict[int, ProcessCollector] = {}

    def _collector(self, pid: int) -> ProcessCollector:
        collector = self._collectors.get(pid)
        if collector is None:
            collector = ProcessCollector(pid=lambda: pid, registry=None)
            self._collectors[pid] = collector
        return collector

    def collect(self) -> Iterator[Metric]:
        pids = self._pids()
        for gone in set(self._collectors) - set(pids):
            del self._collectors[gone]
        yield from combine(list(self._collector(pid).collect()) for pid in pids)


class GcFlusher:
    """Adds this process's garbage-collector statistics to multiprocess counters every
    ``interval`` seconds (counted from when it starts: a forked worker does not count
    the collections it inherited from the supervisor)."""

    def __init__(self, interval: float = GC_FLUSH_SECONDS) -> None:
        self.interval = interval
        private = CollectorRegistry()  # exposed through the multiprocess files only
        generation = ["generation"]
        self.collected = Counter(
            "python_gc_objects_collected",
            "Objects collected during gc",
            generation,
            registry=private,
        )
        self.uncollectable = Counter(
            "python_gc_objects_uncollectable",
            "Uncollectable objects found during GC",
            generation,
            registry=private,
        )
        self.collections = Counter(
            "python_gc_collections",
            "Number of times this generation was collected",
            generation,
            registry=private,
        )
        self._last = gc.get_stats()
        # Every generation present from the start, as the single-process collector has.
        for index in range(len(self._last)):
            for counter in (self.collected, self.uncollectable, self.collections):
                counter.labels(str(index)).inc(0)

    def flush(self) -> None:
        current = gc.get_stats()
        for index, (now, before) in enumerate(zip(current, self._last, strict=False)):
            label = str(index)
            self.collected.labels(label).inc(now["collected"] - before["collected"])
            self.uncollectable.labels(label).inc(now["uncollectable"] - before["uncollectable"])
            self.collections.labels(label).inc(now["collections"] - before["collections"])
        self._last = current

    def start(self) -> None:
        def loop() -> None:
            stop = threading.Event()
            while not stop.wait(self.interval):
                self.flush()

        threading.Thread(target=loop, name="gc-metrics", daemon=True).start()


_flushers: dict[int, GcFlusher] = {}  # by process id: a forked child starts its own
_flushers_lock = threading.Lock()


def start_gc_flusher() -> GcFlusher:
    """This process's one flusher, started on first use."""
    with _flushers_lock:
        flusher = _flushers.get(os.getpid())
        if flusher is None:
            flusher = _flushers[os.getpid()] = GcFlusher()
            flusher.start()
        return flusher
