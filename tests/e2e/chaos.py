"""Faults lose nothing: the chaos driver shared by tests/e2e/processes/test_chaos.py (small N, in
`make test`) and benchmarks/bench_chaos.py (N = 200, prints time to reconverge).

N backends of mixed shapes run on real dispatchers and workers; a fault is injected
while every backend is being changed; then every case must end with:

* every backend converged: status.observedGeneration follows the spec and the change
  is visible in the owned objects (or the status, for an External endpoint);
* no duplicate owned objects: exactly the expected Deployments, StatefulSets,
  Services and HPAs exist, each controlled by its live backend;
* no status field lost: every status field and condition type a backend had before
  the fault is still there;
* zero writes by the controller (Lease renewals aside) in an idle window afterwards,
  read from the API server's audit log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubeio import client as k
from tests.e2e.conftest import (
    DISPATCHER_USER,
    WORKER_USER,
    Cluster,
    Proc,
    Stack,
    concurrent_runs,
    poll,
)

NO_GATE = {"inferencecache.io/require-kv-events": "false"}
LM = {"provider": "LMCacheServer", "ownership": "Managed"}
OWNED_KINDS = ("Deployment", "StatefulSet", "Service", "HorizontalPodAutoscaler")

Objects = dict[tuple[str, str], dict[str, Any]]  # (kind, name) -> object


@dataclass(frozen=True)
class Shape:
    prefix: str
    spec: dict[str, Any]
    owned: tuple[tuple[str, str], ...]  # (kind, name suffix)
    # The spec change of round r (None: this shape is never changed) and whether it
    # shows in the owned objects / the backend.
    bump: Callable[[int], dict[str, Any]] | None = None
    shows: Callable[[str, dict[str, Any], Objects, int], bool] | None = None


def _workload(objs: Objects, kind: str, name: str) -> dict[str, Any]:
    return objs.get((kind, name)) or {}


def _node_selector(obj: dict[str, Any]) -> dict[str, Any]:
    return (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "nodeSelector"
    ) or {}


SHAPES: tuple[Shape, ...] = (
    Shape(
        "lm",
        {"runtime": "VLLM", "remoteStorage": LM},
        (("Deployment", "lmcache-server"), ("Service", "lmcache-server")),
        bump=lambda r: {"replicas": 1 + r % 3},
        shows=lambda n, cb, objs, r: (
            (_workload(objs, "Deployment", f"{n}-lmcache-server").get("spec") or {}).get("replicas")
            == 1 + r % 3
        ),
    ),
    Shape(
        "redis",
        {"runtime": "SGLang", "remoteStorage": {"provider": "Redis", "ownership": "Managed"}},
        (("Deployment", "redis"), ("Service", "redis")),
        bump=lambda r: {"template": {"nodeSelector": {"round": str(r)}}},
        shows=lambda n, cb, objs, r: (
            _node_selector(_workload(objs, "Deployment", f"{n}-redis")).get("round") == str(r)
        ),
    ),
    Shape(
        "moon",
        {
            "runtime": "VLLM",
            "deploymentKind": "StatefulSet",
            "remoteStorage": {"provider": "Mooncake", "ownership": "Managed"},
        },
        (("StatefulSet", "mooncake"), ("Service", "mooncake")),
        bump=lambda r: {"template": {"nodeSelector": {"round": str(r)}}},
        shows=lambda n, cb, objs, r: (
            _node_selector(_workload(objs, "StatefulSet", f"{n}-mooncake")).get("round") == str(r)
        ),
    ),
    Shape(
        "hpa",
        {"runtime": "VLLM", "remoteStorage": LM, "autoscaling": {"minReplicas": 1}},
        (
            ("Deployment", "lmcache-server"),
            ("Service", "lmcache-server"),
            ("HorizontalPodAutoscaler", "lmcache-server"),
        ),
        bump=lambda r: {"autoscaling": {"maxReplicas": 3 + r % 3}},
        shows=lambda n, cb, objs, r: (
            (
                _workload(objs, "HorizontalPodAutoscaler", f"{n}-lmcache-server").get("spec") or {}
            ).get("maxReplicas")
            == 3 + r % 3
        ),
    ),
    Shape(
        "ext",
        {"runtime": "VLLM"},
        (),
        bump=lambda r: {
            "remoteStorage": {
                "provider": "LMCacheServer",
                "ownership": "External",
                "endpoint": f"lm://cache-{r}.example.com:65432",
            }
        },
        shows=lambda n, cb, objs, r: (
            (cb.get("status") or {}).get("endpoint") == f"lm://cache-{r}.example.com:65432"
        ),
    ),
    Shape("events", {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}, ()),
    Shape("host", {"runtime": "VLLM", "lmCache": {"hostMemory": {"capacity": "8Gi"}}}, ()),
)
_BY_PREFIX = {s.prefix: s for s in SHAPES}


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class Chaos:
    cluster: Cluster
    stack: Stack
    n: int
    idle_window: float = 30.0
    converge_timeout: float = 300.0
    ns: str = ""
    round: int = 0
    names: list[str] = field(default_factory=list)
    status_before: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: Callable[[str], None] = lambda msg: None

    # ------------------------------------------------------------ setup

    def start(self, dispatchers: int = 2, workers: int = 2, concurrency: int = 4) -> None:
        for i in range(dispatchers):
            self.start_dispatcher(f"dispatcher-{i}")
        for i in range(workers):
            self.start_worker(f"worker-{i}", concurrency)
        self.ns = self.cluster.namespace()
        self.names = [f"{SHAPES[i % len(SHAPES)].prefix}-{i}" for i in range(self.n)]
        for name in self.names:
            shape = self.shape(name)
            spec = _merge(shape.spec, shape.bump(0)) if shape.bump else shape.spec
            self.cluster.create_cb(self.ns, name, spec, NO_GATE)
        self.wait_converged()
        self.status_before = self.statuses()

    def start_dispatcher(self, name: str) -> Proc:
        return self.stack.start_dispatcher(name, extra=["--redis-timeout", "1"])

    def start_worker(self, name: str, concurrency: int = 4) -> Proc:
        return self.stack.start_worker(
            name, concurrency=concurrency, extra=["--redis-timeout", "1"]
        )

    def shape(self, name: str) -> Shape:
        return _BY_PREFIX[name.rsplit("-", 1)[0]]

    # ------------------------------------------------------------ observation

    def backends(self) -> dict[str, dict[str, Any]]:
        items = self.cluster.kube.list(k.CACHEBACKENDS, self.ns).get("items") or []
        return {cb["metadata"]["name"]: cb for cb in items}

    def owned(self) -> Objects:
        selector = "app.kubernetes.io/managed-by=inference-cache"
        out: Objects = {}
        for kind in OWNED_KINDS:
            listing = self.cluster.kube.list(k.BY_KIND[kind], self.ns, label_selector=selector)
            for obj in listing.get("items") or []:
                out[(kind, obj["metadata"]["name"])] = obj
        return out

    def statuses(self) -> dict[str, dict[str, Any]]:
        return {name: cb.get("status") or {} for name, cb in self.backends().items()}

    def unconverged(self) -> list[str]:
        cbs, objs = self.backends(), self.owned()
        behind = []
        for name in self.names:
            cb = cbs.get(name)
            shape = self.shape(name)
            ok = (
                cb is not None
                and (cb.get("status") or {}).get("observedGeneration")
                == cb["metadata"]["generation"]
                and (shape.shows is None or shape.shows(name, cb, objs, self.round))
            )
            if not ok:
                behind.append(name)
        return behind

    def wait_converged(self) -> float:
        """Seconds until every backend shows the current round."""
        t0 = time.monotonic()
        last: list[str] = []

        def done() -> bool:
            nonlocal last
            last = self.unconverged()
            return not last

        try:
            poll(done, timeout=self.converge_timeout, what="every backend converged", interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still behind: {last[:20]} ({len(last)})") from None
        return time.monotonic() - t0

    # ------------------------------------------------------------ change + faults

    def bump(self) -> None:
        """Change every changeable backend (the next round) without waiting."""
        self.round += 1
        for name in self.names:
            shape = self.shape(name)
            if shape.bump is not None:
                self.cluster.patch_cb(self.ns, name, {"spec": shape.bump(self.round)})

    def busy_worker(self) -> Proc | None:
        """A live worker with a reconcile started and not ended (from its trace)."""
        for proc in self.stack.procs:
            if proc.name.startswith("worker") and proc.alive:
                text = proc.log()
                if text.count('"msg": "reconcile start"') > text.count('"msg": "reconcile end"'):
                    return proc
        return None

    def leader(self) -> Proc:
        holder = poll(self.stack.lease_holder, timeout=60, what="a Lease holder")
        return poll(
            lambda: next(
                (p for p in self.stack.procs if p.alive and self.stack.identity(p.name) == holder),
                None,
            ),
            timeout=30,
            what=f"the leader process {holder}",
        )

    # ------------------------------------------------------------ invariants

    def check_invariants(self) -> None:
        cbs, objs = self.backends(), self.owned()
        assert sorted(cbs) == sorted(self.names)
        expected = {
            (kind, f"{name}-{suffix}"): cbs[name]["metadata"]["uid"]
            for name in self.names
            for kind, suffix in self.shape(name).owned
        }
        assert set(objs) == set(expected), {
            "missing": sorted(set(expected) - set(objs)),
            "extra": sorted(set(objs) - set(expected)),
        }
        for key, obj in objs.items():
            controllers = [
                ref for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("controller")
            ]
            assert [ref["uid"] for ref in controllers] == [expected[key]], (key, controllers)
        for name, before in self.status_before.items():
            after = cbs[name].get("status") or {}
            lost = set(before) - set(after)
            assert not lost, f"{name}: status fields lost: {sorted(lost)}"
            types_before = {c["type"] for c in before.get("conditions") or []}
            types_after = {c["type"] for c in after.get("conditions") or []}
            assert types_before <= types_after, f"{name}: conditions lost: {types_before}"
        overlaps = concurrent_runs(self.stack.reconcile_runs())
        assert overlaps == [], overlaps[:5]
        self.status_before = {name: cb.get("status") or {} for name, cb in cbs.items()}

    def controller_writes(self, since: int) -> list[Any]:
        return [
            e
            for e in self.cluster.cp.write_events(since)
            if e.user in (WORKER_USER, DISPATCHER_USER)
            and e.resource != "leases"
            and e.namespace in (self.ns, "")
        ]

    def assert_idle(self) -> None:
        """Zero controller writes in ``idle_window`` seconds, once follow-up writes
        of the reconverge (status after our own writes) have settled."""
        cp = self.cluster.cp
        settle = max(3 * self.stack.resync_period, 5.0)

        def quiet() -> int | None:
            mark = cp.audit_offset()
            time.sleep(settle)
            cp.audit_barrier(mark)
            return mark if not self.controller_writes(mark) else None

        poll(quiet, timeout=120, what="the controller to go quiet", interval=0)
        mark = cp.audit_offset()
        # The idle window is what is measured here, not a synchronisation.
        time.sleep(self.idle_window)
        cp.audit_barrier(mark)
        writes = self.controller_writes(mark)
        assert writes == [], [(e.verb, e.resource, e.namespace, e.name) for e in writes]


# ---------------------------------------------------------------- the faults


def worker_sigkilled_mid_reconcile(chaos: Chaos, kills: int = 3) -> None:
    """A worker SIGKILLed while it runs a reconcile, ``kills`` times, each during a
    fresh round of changes; a replacement worker is started each time."""
    for i in range(kills):
        chaos.bump()
        victim = poll(chaos.busy_worker, timeout=60, what="a worker mid-reconcile", interval=0.005)
        victim.kill()
        chaos.log(f"  SIGKILLed {victim.name} mid-reconcile ({i + 1}/{kills})")
        chaos.start_worker(f"{victim.name}-r{i}")


def redis_restarted_empty(chaos: Chaos) -> None:
    """Redis SIGKILLed while reconciles run and back empty (no persistence): the
    queue, the leases and the broker's messages are gone."""
    chaos.bump()
    poll(chaos.busy_worker, timeout=60, what="a worker mid-reconcile", interval=0.005)
    chaos.stack.redis_server.restart(kill=True, persistence=False)


def apiserver_restarted(chaos: Chaos) -> None:
    chaos.bump()
    chaos.cluster.cp.restart_apiserver()


def etcd_restarted(chaos: Chaos) -> None:
    chaos.bump()
    chaos.cluster.cp.restart_etcd()


def leader_dispatcher_sigkilled(chaos: Chaos) -> None:
    leader = chaos.leader()
    # Killed first, so only a new leader can dispatch the changes.
    leader.kill()
    chaos.bump()
    chaos.log(f"  SIGKILLed the leader {leader.name}")
    chaos.start_dispatcher(f"{leader.name}-r")


FAULTS: dict[str, Callable[..., None]] = {
    "worker-sigkill": worker_sigkilled_mid_reconcile,
    "redis-restart-empty": redis_restarted_empty,
    "apiserver-restart": apiserver_restarted,
    "etcd-restart": etcd_restarted,
    "leader-sigkill": leader_dispatcher_sigkilled,
}


def run_fault(chaos: Chaos, fault: str, **options: Any) -> float:
    """Inject ``fault``, wait for every backend to reconverge, check every invariant
    and the idle window. Returns the seconds from the fault to reconvergence."""
    t0 = time.monotonic()
    FAULTS[fault](chaos, **options)
    chaos.wait_converged()
    took = time.monotonic() - t0
    chaos.check_invariants()
    chaos.assert_idle()
    return took
