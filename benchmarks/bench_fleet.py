"""The reconciler's idle API-server cost at fleet shape, from the API server's counters.

For each shape (B, E, U) this starts a fresh etcd + kube-apiserver (tests/harness), a
real Redis, one `icache dispatcher` and W `icache worker` processes running as the
ServiceAccounts of manifests/rbac, then in one namespace creates:

- B CacheBackends, round-robin over the CacheBackend samples of manifests/samples/,
  each with its own spec.engineSelector (``app: <backend name>``);
- per backend one engine Deployment with a ReplicaSet and E engine pods owned by it,
  wired as the Pod webhook wires them (``shared.pod_wiring.wire_pod`` against the live
  backend: connector env, sidecars, the decision annotations);
- U unrelated pods (two containers, args, env: an ordinary application pod).

Pods stay Pending: there is no scheduler or kubelet. The benchmark waits for
convergence (every backend's status.observedGeneration current, a Managed backend's
status.endpoint published, then status.matchedEnginePods == E everywhere), waits for
the controller to go quiet (a resync period without a write), and reads the
kube-apiserver's own counters over an idle window:

- ``apiserver_request_total`` and ``apiserver_response_sizes_sum`` (GET and LIST; the
  API server records no response size for a WATCH), before and after the window;
- the same window again with the controller stopped: the floor (the API server's own
  loopback requests, e.g. its lease and the Service IP repair loop), subtracted;
- the audit log's count of the controller's own requests (its two users), which must
  agree with the metric delta minus the floor.

Watches are long-lived: each ends after its timeout (300 s, the dispatcher's and the
workers' default) and is re-opened from the last resourceVersion, one WATCH request
and no list. An idle window shorter than that may see none of them, so the steady
state is also printed with them: the reads of the window other than watch opens, plus
the controller's open watch streams (``apiserver_longrunning_requests{verb="WATCH"}``
less the floor's) times 60 / 300 a minute.

Leader-election Lease traffic (the dispatcher's renewals) is reported on its own line,
not in the reads and writes, as in the table it is compared with. It prints reads, read
MiB and writes per idle minute, the bytes the controller's watches received over the
window (``apiserver_watch_events_sizes_sum``), the convergence times and the peak RSS
(VmHWM) of each worker process.

    .venv/bin/python benchmarks/bench_fleet.py                          # the three shapes
    .venv/bin/python benchmarks/bench_fleet.py --shapes 120x8x1000 --idle 60
    .venv/bin/python benchmarks/bench_fleet.py --shapes 120x8x0 --worker-arg=--reads=api
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubeio import client as k  # noqa: E402
from reconciler.dispatch.dispatcher import DispatcherSettings  # noqa: E402
from reconciler.watch.cluster_cache import ClusterCache  # noqa: E402
from shared.constants import INSTALL_NAMESPACE  # noqa: E402
from shared.pod_wiring import wire_pod  # noqa: E402
from shared.runtime_adapters.base import InjectContext  # noqa: E402
from tests.e2e.conftest import DISPATCHER_USER, WORKER_USER, install_cluster  # noqa: E402
from tests.harness.controlplane import ControlPlane, child_pids  # noqa: E402
from tests.harness.redis_server import RedisServer  # noqa: E402
from tests.samples import sample_backends  # noqa: E402

NAMESPACE = "fleet"
CONTROLLER_USERS = frozenset({WORKER_USER, DISPATCHER_USER})
READ_VERBS = frozenset({"GET", "LIST", "WATCH"})
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE"})
AUDIT_READ_VERBS = frozenset({"get", "list", "watch"})
MIB = 1024 * 1024
# The watches' timeoutSeconds in the dispatcher and the workers (their default; each
# stream is re-opened when it ends).
WATCH_TIMEOUT_SECONDS = DispatcherSettings.watch_timeout
assert (
    inspect.signature(ClusterCache).parameters["watch_timeout"].default == WATCH_TIMEOUT_SECONDS
), "the workers' watches end on another timeout than the dispatcher's"
SUBSCRIBER_IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:0.1.0"


# --------------------------------------------------------------------- objects


def backend_objects() -> list[tuple[str, dict[str, Any]]]:
    """(shape name, CacheBackend document) of every sample."""
    return [(doc["metadata"]["name"], doc) for _, doc in sample_backends()]


def make_backend(shape: dict[str, Any], name: str) -> dict[str, Any]:
    body = copy.deepcopy(shape)
    body["metadata"] = {
        "name": name,
        "annotations": {
            **(shape.get("metadata", {}).get("annotations") or {}),
            # No cache-index server here: the KV-event gate would flip every backend
            # to NoKVEventsObserved (a status write) somewhere in the idle window.
            "inferencecache.io/require-kv-events": "false",
        },
    }
    body.setdefault("spec", {})["engineSelector"] = {"matchLabels": {"app": name}}
    return body


def engine_container(name: str, runtime: str) -> dict[str, Any]:
    if runtime == "SGLang":
        command = ["python3", "-m", "sglang.launch_server"]
        args = ["--model-path", "Qwen/Qwen3-8B", "--port", "30000", "--tp", "1"]
        image = "lmsysorg/sglang:v0.5.13-cu129"
        port = 30000
    else:
        command = ["vllm", "serve"]
        args = ["meta-llama/Llama-3.1-8B-Instruct", "--port", "8000",
                "--max-model-len", "8192", "--gpu-memory-utilization", "0.9"]  # fmt: skip
        image = "vllm/vllm-openai:v0.11.0"
        port = 8000
    return {
        "name": "sglang" if runtime == "SGLang" else "vllm",
        "image": image,
        "command": command,
        "args": args,
        "env": [
            {"name": "HF_HOME", "value": "/models/hf"},
            {"name": "ENGINE_NAME", "value": name},
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "http", "containerPort": port}],
        "resources": {
            "limits": {"nvidia.com/gpu": "1", "memory": "64Gi"},
            "requests": {"cpu": "4", "memory": "48Gi"},
        },
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10},
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
    }


def engine_template(name: str, runtime: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name, "tier": "inference"}},
        "spec": {
            "containers": [engine_container(name, runtime)],
            "volumes": [{"name": "models", "emptyDir": {}}],
        },
    }


def unrelated_pod(index: int) -> dict[str, Any]:
    app = f"web-{index % 50:02d}"
    env = [{"name": f"SETTING_{i}", "value": f"value-{i}-{app}"} for i in range(6)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{index:05d}",
            "labels": {"app": app, "team": "storefront", "version": "v3"},
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/{app}:3.1.4",
                    "args": ["--listen=:8080", "--metrics=:9090", "--log-format=json"],
                    "env": env,
                    "ports": [{"containerPort": 8080}, {"containerPort": 9090}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                },
                {
                    "name": "log-shipper",
                    "image": "registry.example.com/log-shipper:1.9",
                    "args": ["--input=/var/log/app", "--output=stdout"],
                    "env": [{"name": "SHIPPER_BUFFER", "value": "8Mi"}],
                },
            ]
        },
    }


# --------------------------------------------------------------------- measuring


@dataclass
class Counters:
    """What /metrics says, by (verb, resource)."""

    requests: dict[tuple[str, str], float] = field(default_factory=dict)
    read_bytes: dict[tuple[str, str], float] = field(default_factory=dict)
    watch_bytes: dict[str, float] = field(default_factory=dict)
    # Watch streams open at the scrape (a gauge: not subtracted by ``minus``).
    open_watches: float = 0.0

    def minus(self, other: Counters) -> Counters:
        def sub(a: dict[Any, float], b: dict[Any, float]) -> dict[Any, float]:
            return {key: a.get(key, 0.0) - b.get(key, 0.0) for key in set(a) | set(b)}

        return Counters(
            sub(self.requests, other.requests),
            sub(self.read_bytes, other.read_bytes),
            sub(self.watch_bytes, other.watch_bytes),
        )


def scrape(cp: ControlPlane) -> Counters:
    status, body = cp.get("/metrics", timeout=30)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    out = Counters(defaultdict(float), defaultdict(float), defaultdict(float))
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = sample.labels
            resource = labels.get("resource", "")
            if not resource:
                continue  # /metrics, /healthz and the like
            if sample.name == "apiserver_request_total":
                out.requests[(labels["verb"], resource)] += sample.value
            elif sample.name == "apiserver_response_sizes_sum":
                out.read_bytes[(labels["verb"], resource)] += sample.value
            elif sample.name == "apiserver_watch_events_sizes_sum":
                out.watch_bytes[resource] += sample.value
            elif sample.name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH":
                out.open_watches += sample.value
    return out


def reads(c: Counters, *, leases: bool = False) -> float:
    return sum(
        v
        for (verb, res), v in c.requests.items()
        if verb in READ_VERBS and (res == "leases") == leases
    )


def writes(c: Counters, *, leases: bool = False) -> float:
    return sum(
        v
        for (verb, res), v in c.requests.items()
        if verb in WRITE_VERBS and (res == "leases") == leases
    )


def read_bytes(c: Counters, combos: set[tuple[str, str]] | None = None) -> float:
    """Response bytes of GET/LIST, over ``combos`` ((VERB, resource)) when given."""
    return sum(
        max(v, 0.0)
        for key, v in c.read_bytes.items()
        if key[1] != "leases" and (combos is None or key in combos)
    )


def peak_rss_mib(pid: int) -> float:
    """VmHWM of ``pid`` plus its children (a prefork pool's processes)."""
    total = 0
    for p in [pid, *child_pids(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total / 1024


# --------------------------------------------------------------------- processes


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    fh = log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "icache_cli.main", *args],
            cwd=REPO,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        fh.close()


def stop(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)
    return time.monotonic() - start


# --------------------------------------------------------------------- one case


@dataclass(frozen=True)
class Shape:
    backends: int
    engines: int
    unrelated: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        b, e, u = (int(x) for x in text.lower().split("x"))
        return cls(b, e, u)

    def __str__(self) -> str:
        return f"(B={self.backends}, E={self.engines}, U={self.unrelated})"


def converged_backend(obj: dict[str, Any]) -> bool:
    st = obj.get("status") or {}
    if st.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    rs = (obj.get("spec") or {}).get("remoteStorage") or {}
    managed = rs.get("provider") and rs.get("ownership", "Managed") == "Managed"
    mode = ((obj.get("spec") or {}).get("integration") or {}).get("mode")
    return bool(st.get("endpoint")) or not managed or mode == "EventsOnly"


def run_case(
    shape: Shape, args: argparse.Namespace, redis_server: RedisServer, workdir: Path, db: int
) -> dict[str, Any]:
    case_dir = workdir / f"b{shape.backends}-e{shape.engines}-u{shape.unrelated}"
    case_dir.mkdir(parents=True, exist_ok=True)
    # Room for a ClusterIP per managed backend (the harness default /24 holds ~250).
    cp = ControlPlane(extra_apiserver_args=["--service-cluster-ip-range=10.0.0.0/16"])
    cp.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        cluster = install_cluster(cp, case_dir / "kubeconfigs")
        kube = cluster.kube
        url = redis_server.url_for_db(db)
        redis.Redis.from_url(url).flushdb()
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        wait_for(
            lambda: cp.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")[0] == 200,
            30,
            "the namespace's default ServiceAccount",
        )
        procs.append(
            spawn(
                ["dispatcher", "--kubeconfig", str(cluster.dispatcher_kubeconfig),
                 "--redis-url", url, "--lease-namespace", INSTALL_NAMESPACE,
                 "--resync-period", str(args.resync_period),
                 "--watch-timeout", str(WATCH_TIMEOUT_SECONDS), "--log-level", "WARNING"],
                case_dir / "dispatcher.log",
            )
        )  # fmt: skip
        workers = [
            spawn(
                ["worker", "--kubeconfig", str(cluster.worker_kubeconfig), "--redis-url", url,
                 "--concurrency", str(args.concurrency), "--log-level", "WARNING",
                 *args.worker_arg],
                case_dir / f"worker-{i}.log",
            )
            for i in range(args.workers)
        ]  # fmt: skip
        procs.extend(workers)
        time.sleep(3.0)  # the processes connect; not part of any figure

        shapes = backend_objects()
        names = [f"{shapes[i % len(shapes)][0][:40]}-{i:03d}" for i in range(shape.backends)]
        shape_of = {n: shapes[i % len(shapes)][1] for i, n in enumerate(names)}

        # ---- backends
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda n: kube.create(k.CACHEBACKENDS, NAMESPACE, make_backend(shape_of[n], n)),
                    names,
                )
            )

        def backends_converged() -> bool:
            items = kube.list(k.CACHEBACKENDS, NAMESPACE).get("items") or []
            return len(items) == len(names) and all(converged_backend(o) for o in items)

        backends_s = wait_for(backends_converged, args.timeout, "the backends to converge")

        # ---- engine workloads and pods, wired against the live backends
        live = {
            o["metadata"]["name"]: o
            for o in kube.list(k.CACHEBACKENDS, NAMESPACE).get("items") or []
        }
        ctx = InjectContext(kvevent_subscriber_image=SUBSCRIBER_IMAGE)

        def create_engines(name: str) -> None:
            cb = live[name]
            runtime = cb["spec"]["runtime"]
            template = engine_template(name, runtime)
            dep = kube.create(
                k.DEPLOYMENTS,
                NAMESPACE,
                {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": f"{name}-engine"},
                 "spec": {"replicas": shape.engines,
                          "selector": {"matchLabels": {"app": name}}, "template": template}},
            )  # fmt: skip
            # As the deployment controller makes it: the template's labels plus
            # pod-template-hash, the revision and desired-replicas annotations (the
            # worker derives the engine Deployment from them).
            rs_labels = {**template["metadata"]["labels"], "pod-template-hash": "7d9f"}
            rs = kube.create(
                k.REPLICASETS,
                NAMESPACE,
                {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                 "metadata": {"name": f"{name}-engine-7d9f", "labels": rs_labels,
                              "annotations": {
                                  "deployment.kubernetes.io/revision": "1",
                                  "deployment.kubernetes.io/desired-replicas": str(shape.engines),
                                  "deployment.kubernetes.io/max-replicas": str(shape.engines + 1),
                              },
                              "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                   "name": dep["metadata"]["name"],
                                                   "uid": dep["metadata"]["uid"],
                                                   "controller": True}]},
                 "spec": {"replicas": shape.engines,
                          "selector": {"matchLabels": rs_labels},
                          "template": {**template, "metadata": {"labels": rs_labels}}}},
            )  # fmt: skip
            for j in range(shape.engines):
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{rs['metadata']['name']}-{j:02d}",
                        "namespace": NAMESPACE,
                        "labels": dict(rs_labels),
                        "ownerReferences": [
                            {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "name": rs["metadata"]["name"], "uid": rs["metadata"]["uid"],
                             "controller": True}
                        ],
                    },
                    "spec": copy.deepcopy(template["spec"]),
                }  # fmt: skip
                wired = wire_pod(pod, [cb], ctx).pod
                kube.create(k.PODS, NAMESPACE, wired)

        t1 = time.monotonic()
        with ThreadPoolExecutor(args.create_threads) as pool:
            list(pool.map(create_engines, names))
            list(
                pool.map(
                    lambda i: kube.create(k.PODS, NAMESPACE, unrelated_pod(i)),
                    range(shape.unrelated),
                )
            )
        created_s = time.monotonic() - t1

        def pods_seen() -> bool:
            items = kube.list(k.CACHEBACKENDS, NAMESPACE).get("items") or []
            return all(
                (o.get("status") or {}).get("matchedEnginePods") == shape.engines for o in items
            )

        pods_s = wait_for(pods_seen, args.timeout, "matchedEnginePods == E on every backend")

        # ---- quiet: a whole resync period without a write by the controller
        def controller_writes(since: int) -> int:
            return sum(
                1
                for e in cp.audit_events(since)
                if e.user in CONTROLLER_USERS and e.is_write and e.resource != "leases"
            )

        settle_start = time.monotonic()
        while True:
            mark = cp.audit_offset()
            time.sleep(args.resync_period + 2)
            if controller_writes(mark) == 0:
                break
            if time.monotonic() - settle_start > args.timeout:
                raise RuntimeError("the controller kept writing")

        # ---- idle window
        before = scrape(cp)
        audit_mark = cp.audit_offset()
        time.sleep(args.idle)
        after = scrape(cp)
        cp.audit_barrier(audit_mark)
        events = [e for e in cp.audit_events(audit_mark) if e.user in CONTROLLER_USERS]
        rss = [peak_rss_mib(p.pid) for p in workers]
        dispatcher_rss = peak_rss_mib(procs[0].pid)
        stop(procs)
        procs = []

        # ---- floor: the same window with the controller stopped
        time.sleep(2.0)
        floor_before = scrape(cp)
        time.sleep(args.idle)
        floor_after = scrape(cp)

        per_min = 60.0 / args.idle
        # The controller's watch streams, and how often they re-open at steady state:
        # each ends after its timeoutSeconds and is re-opened (one WATCH request, no
        # list), a rate an idle window shorter than the timeout may not see.
        controller_watches = max(after.open_watches - floor_after.open_watches, 0.0)
        reopens_per_min = controller_watches * 60.0 / WATCH_TIMEOUT_SECONDS
        floor = floor_after.minus(floor_before)
        delta = after.minus(before).minus(floor)
        # Bytes are the API server's per (verb, resource), not per user: count them for
        # what the audit log shows the controller read, less the floor's.
        controller_reads = {
            (e.verb.upper(), e.resource)
            for e in events
            if e.verb in ("get", "list") and e.resource != "leases"
        }
        audit_reads = sum(
            1 for e in events if e.verb in AUDIT_READ_VERBS and e.resource != "leases"
        )
        audit_writes = sum(1 for e in events if e.is_write and e.resource != "leases")
        audit_watches = sum(1 for e in events if e.verb == "watch" and e.resource != "leases")
        by_resource: dict[str, int] = defaultdict(int)
        for e in events:
            if e.verb in AUDIT_READ_VERBS and e.resource != "leases":
                by_resource[f"{e.verb} {e.resource}"] += 1
        return {
            "shape": str(shape),
            "backends_converged_s": backends_s,
            "pods_created_s": created_s,
            "pods_seen_s": pods_s,
            "reads_per_min": reads(delta) * per_min,
            "audit_reads_per_min": audit_reads * per_min,
            "open_watches": controller_watches,
            "watch_reopens_per_min": reopens_per_min,
            # Reads other than watch re-opens in the window, plus the re-open rate.
            "steady_reads_per_min": (audit_reads - audit_watches) * per_min + reopens_per_min,
            "read_mib_per_min": read_bytes(delta, controller_reads) / MIB * per_min,
            "floor_read_mib_per_min": read_bytes(floor) / MIB * per_min,
            "floor_reads_per_min": reads(floor) * per_min,
            "writes_per_min": writes(delta) * per_min,
            "audit_writes_per_min": audit_writes * per_min,
            "lease_reads_per_min": reads(delta, leases=True) * per_min,
            "lease_writes_per_min": writes(delta, leases=True) * per_min,
            "watch_mib_per_min": sum(after.minus(before).watch_bytes.values()) / MIB * per_min,
            "worker_peak_rss_mib": rss,
            "dispatcher_peak_rss_mib": dispatcher_rss,
            "reads_by_resource_per_min": {
                key: n * per_min for key, n in sorted(by_resource.items())
            },
            "total_s": time.monotonic() - t0,
        }
    finally:
        stop(procs)
        cp.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shapes",
        default="120x8x0,120x8x1000,500x4x5000",
        help="comma-separated BxExU: backends, engine pods per backend, unrelated pods",
    )
    ap.add_argument("--workers", type=int, default=1, help="worker processes")
    ap.add_argument("--concurrency", type=int, default=4, help="threads per worker process")
    ap.add_argument("--resync-period", type=float, default=30.0)
    ap.add_argument("--idle", type=float, default=60.0, help="idle window (s)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per wait (s)")
    ap.add_argument("--create-threads", type=int, default=16)
    ap.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="extra argument for every `icache worker` (repeatable)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shapes = [Shape.parse(s) for s in args.shapes.split(",") if s]
    workdir = Path(tempfile.mkdtemp(prefix="icache-bench-fleet-"))
    rs = RedisServer()
    rs.start()
    results = []
    try:
        for db, shape in enumerate(shapes, start=1):
            r = run_case(shape, args, rs, workdir, db)
            results.append(r)
            print(
                f"{r['shape']}: backends converged in {r['backends_converged_s']:.1f}s, "
                f"engine pods seen {r['pods_seen_s']:.1f}s after their creation "
                f"(creating took {r['pods_created_s']:.1f}s) | idle minute: "
                f"{r['audit_reads_per_min']:.0f} reads (metrics less floor "
                f"{r['reads_per_min']:.0f}; steady state with the re-opens of "
                f"{r['open_watches']:.0f} watches every {WATCH_TIMEOUT_SECONDS}s: "
                f"{r['steady_reads_per_min']:.1f}), {r['read_mib_per_min']:.2f} read MiB, "
                f"{r['audit_writes_per_min']:.0f} writes (metrics less floor "
                f"{r['writes_per_min']:.0f}); watch events {r['watch_mib_per_min']:.2f} MiB; "
                f"floor {r['floor_reads_per_min']:.0f} reads, "
                f"{r['floor_read_mib_per_min']:.2f} MiB | leader Lease: "
                f"{r['lease_reads_per_min']:.0f} reads, {r['lease_writes_per_min']:.0f} writes "
                f"| peak RSS: dispatcher {r['dispatcher_peak_rss_mib']:.0f} MiB, workers "
                + ", ".join(f"{m:.0f} MiB" for m in r["worker_peak_rss_mib"]),
                flush=True,
            )
            print(
                "    reads by resource: " + json.dumps(r["reads_by_resource_per_min"]), flush=True
            )
    finally:
        rs.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"logs: {workdir}")
    return 0 if all(r["audit_writes_per_min"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
