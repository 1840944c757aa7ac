"""Faults lose nothing: the chaos suite, lean (the full N = 200 run with a 30 s idle
window is benchmarks/bench_chaos.py).

Each case: N backends of mixed shapes on two dispatchers and two workers; every
backend is changed and one fault is injected; the case ends with every backend
converged, no duplicate owned objects, no status field lost, no key reconciled by
two workers at once, and zero controller writes in an idle window afterwards.
``ICACHE_CHAOS_N`` and ``ICACHE_CHAOS_IDLE`` (seconds) scale it up.
"""

from __future__ import annotations

import os

import pytest

from tests.e2e.chaos import FAULTS, Chaos, run_fault
from tests.e2e.conftest import Cluster, Stack

N = int(os.environ.get("ICACHE_CHAOS_N", "7"))
IDLE_WINDOW = float(os.environ.get("ICACHE_CHAOS_IDLE", "6"))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_backend_reconverges_after(fault: str, cluster: Cluster, stack: Stack) -> None:
    chaos = Chaos(cluster, stack, n=N, idle_window=IDLE_WINDOW, log=print)
    chaos.start()
    # Lean: two worker kills (the benchmark does three); still "repeatedly".
    options = {"kills": 2} if fault == "worker-sigkill" else {}
    took = run_fault(chaos, fault, **options)
    print(f"{fault}: reconverged {N} backends in {took:.1f}s")
