"""A dead or black-holed Redis never wedges a process.

Real API server, real Redis-compatible server frozen with SIGSTOP (its connections
stay open and nothing answers, as when the node running Redis dies), real
`icache dispatcher` and `icache worker` processes.
"""

from __future__ import annotations

import time
from typing import Any

from kubeio import client as k
from tests.e2e.conftest import Cluster, Stack, concurrent_runs, converged, poll

NO_GATE = {"inferencecache.io/require-kv-events": "false"}

# Longer than the Stack defaults so a loaded 2-core machine still tells "took over
# within lease duration + retry period" from "took over late".
LEASE_DURATION = 6.0
RENEW_DEADLINE = 3.0
RETRY_PERIOD = 0.5
ELECTION = [
    "--lease-duration", str(LEASE_DURATION),
    "--renew-deadline", str(RENEW_DEADLINE),
    "--retry-period", str(RETRY_PERIOD),
    "--redis-timeout", "1",
]  # fmt: skip

SHAPES: dict[str, dict[str, Any]] = {
    "lm": {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
    },
    "redis": {"runtime": "SGLang", "remoteStorage": {"provider": "Redis", "ownership": "Managed"}},
    "sts": {
        "runtime": "VLLM",
        "deploymentKind": "StatefulSet",
        "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
    },
    "events": {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}},
}


def test_frozen_redis_hands_the_lease_to_the_standby_and_everything_converges_after(
    cluster: Cluster, stack: Stack
) -> None:
    """Redis frozen (SIGSTOP) for longer than the lease while a second
    dispatcher waits. The leader, whose pump can no longer reach Redis, gives the Lease
    up after the renew deadline, so the standby takes over within lease duration +
    retry period; after SIGCONT every backend converges, including changes made
    during the outage, and no key ever ran in two workers at once."""
    a = stack.start_dispatcher("dispatcher-a", extra=ELECTION)
    b = stack.start_dispatcher("dispatcher-b", extra=ELECTION)
    for name in ("worker-1", "worker-2"):
        stack.start_worker(name, extra=["--redis-timeout", "1"])
    ours = {stack.identity(a.name), stack.identity(b.name)}
    holder = poll(
        lambda: (h := stack.lease_holder()) in ours and h, timeout=60, what="one of ours leads"
    )
    leader, standby = (a, b) if holder == stack.identity(a.name) else (b, a)
    poll(lambda: "became leader" in leader.log() or None, timeout=30, what="leader log")

    ns = cluster.namespace()
    names = [f"{shape}-{i}" for i in range(2) for shape in SHAPES]
    for name in names:
        cluster.create_cb(ns, name, SHAPES[name.split("-")[0]], NO_GATE)
    for name in names:
        cluster.wait_cb(ns, name, converged, "converged before the freeze", timeout=90)

    frozen_at = time.monotonic()
    with stack.redis_server.frozen():
        poll(
            lambda: stack.lease_holder() == stack.identity(standby.name) or None,
            timeout=60,
            what="the standby to take the Lease over while Redis is frozen",
            interval=0.05,
        )
        took_over = time.monotonic() - frozen_at
        # The API server still works: changes made now must land after the thaw.
        cluster.patch_cb(ns, "lm-0", {"spec": {"replicas": 2}})
        cluster.create_cb(ns, "during", SHAPES["lm"], NO_GATE)
        # Stay frozen for longer than the lease (and the workers' queue leases).
        while time.monotonic() - frozen_at < 2 * LEASE_DURATION:
            time.sleep(0.2)
    assert took_over <= LEASE_DURATION + RETRY_PERIOD, (
        f"standby took over {took_over:.1f}s after the freeze\n{stack.logs()}"
    )
    assert "giving up the lease" in leader.log()

    for name in [*names, "during"]:
        cluster.wait_cb(ns, name, converged, "converged after the thaw", timeout=120)
    poll(
        lambda: cluster.kube.get(k.DEPLOYMENTS, ns, "lm-0-lmcache-server")["spec"]["replicas"] == 2,
        timeout=60,
        what="the change made during the freeze applied",
    )
    cluster.kube.get(k.DEPLOYMENTS, ns, "during-lmcache-server")
    # Someone leads again once Redis answers (the one that gave up re-campaigns).
    poll(lambda: stack.lease_holder() in ours or None, timeout=60, what="a leader after the thaw")

    runs = stack.reconcile_runs()
    assert runs, "no reconcile traced"
    overlaps = concurrent_runs(runs)
    assert overlaps == [], overlaps


def test_a_leader_whose_api_server_stops_answering_steps_down_within_the_lease(
    cluster: Cluster, stack: Stack
) -> None:
    """The leader election never wedges either: a Lease renewal is bounded by the renew
    deadline, so a leader whose API server hangs (SIGSTOP) stops leading before its
    Lease can expire for a standby — not after the client's 30 s request timeout."""
    a = stack.start_dispatcher("dispatcher-a", extra=ELECTION)
    stack.start_worker()
    poll(lambda: stack.lease_holder() == stack.identity(a.name) or None, timeout=60, what="a leads")
    poll(lambda: "became leader" in a.log() or None, timeout=30, what="leader log")
    with cluster.cp.apiserver_paused():
        paused_at = time.monotonic()
        poll(
            lambda: "lost the lease: stepping down" in a.log() or None,
            timeout=LEASE_DURATION * 3,
            what="the leader to step down while the API server hangs",
            interval=0.05,
        )
        stepped_down = time.monotonic() - paused_at
    assert stepped_down < LEASE_DURATION, stepped_down
    poll(lambda: a.log().count("became leader") >= 2 or None, timeout=60, what="leads again")
