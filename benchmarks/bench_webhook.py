"""Admission throughput over TLS, `icache webhook` against a compiled floor.

One run, on one machine:

* starts a real etcd + kube-apiserver (tests/harness), installs the CRD and a few
  CacheBackends in namespace ``bench`` (the samples from manifests/samples/);
* starts ``icache webhook`` with TLS in live mode against it (CacheBackends listed
  from the API server on every Pod admission);
* builds the floor, a minimal Go net/http TLS server (benchmarks/floor/) that decodes
  the AdmissionReview and answers allowed:true, and for the Pod route also lists the
  namespace's CacheBackends once from the same API server;
* installs vegeta from the Go module proxy (pinned) and drives each endpoint of each
  server with keep-alive HTTP/1.1 TLS traffic: a fixed number of workers, no rate
  limit, a fixed duration, the same payloads (examples/admission/);
* prints req/s, p50 and p99 per endpoint, the project's figures as a ratio to the
  floor (req/s ratio: higher is better; >= 1.0 means at least as fast), and the RSS
  of every webhook worker process at idle and at its peak under load.

Go builds and vegeta go to a cache outside the tree (``$XDG_CACHE_HOME`` or
~/.cache, ``inference-cache/bench``).

    .venv/bin/python benchmarks/bench_webhook.py [--duration 5] [--connections 8]
    make bench-webhook BENCH_ARGS="--duration 10 --webhook-workers 2"
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from tests.harness.controlplane import (  # noqa: E402
    CertificateAuthority,
    ControlPlane,
    free_port,
    tail,
    terminate_process_group,
    wait_until,
)
from tests.kube_helpers import install_crd  # noqa: E402
from tests.samples import sample_backends  # noqa: E402
from tests.webhook_process import run_webhook  # noqa: E402

VEGETA = "github.com/tsenart/vegeta/v12"
VEGETA_VERSION = "v12.13.0"
NS = "bench"
EXAMPLES = ROOT / "examples" / "admission"
FLOOR_SRC = ROOT / "benchmarks" / "floor"
# (label, path, example payload): the payloads of examples/admission/.
ENDPOINTS = (
    (
        "validate CacheBackend",
        "/validate-inferencecache-io-v1alpha1-cachebackend",
        "create-vllm-lmcacheserver-managed.json",
    ),
    (
        "default CacheBackend",
        "/mutate-inferencecache-io-v1alpha1-cachebackend",
        "mutate-create-defaults.json",
    ),
    ("Pod wiring (live list)", "/mutate--v1-pod", "pod-vllm-host-only.json"),
)
# The backends stored in the namespace: the one the pod payload matches, and others.
BACKEND_SAMPLES = (
    "vllm-lmcache-host-only.yaml",
    "sglang-hicache.yaml",
    "vllm-events-only.yaml",
    "sglang-lmcache-host-only.yaml",
    "vllm-engine-overrides.yaml",
)


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    out = base / "inference-cache" / "bench"
    (out / "bin").mkdir(parents=True, exist_ok=True)
    return out


def go_env(cache: Path) -> dict[str, str]:
    return {**os.environ, "GOBIN": str(cache / "bin"), "GOFLAGS": "-mod=mod"}


def install_vegeta(cache: Path) -> Path:
    binary = cache / "bin" / "vegeta"
    stamp = cache / "bin" / "vegeta.version"
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == VEGETA_VERSION:
        return binary
    print(f"installing vegeta {VEGETA_VERSION} from the Go module proxy into {binary}")
    subprocess.run(
        ["go", "install", f"{VEGETA}@{VEGETA_VERSION}"],
        check=True,
        env=go_env(cache),
        cwd=tempfile.gettempdir(),  # outside any module: `go install pkg@version`
    )
    stamp.write_text(VEGETA_VERSION)
    return binary


def build_floor(cache: Path) -> Path:
    binary = cache / "bin" / "webhook-floor"
    subprocess.run(
        ["go", "build", "-o", str(binary), "."], check=True, env=go_env(cache), cwd=FLOOR_SRC
    )
    return binary


# --------------------------------------------------------------------------- #
# Payloads and the cluster state they need
# --------------------------------------------------------------------------- #


# --validate-as: the validate payload's requesting user (None: the example's own, a
# system:masters admin, for whom the webhook makes no SubjectAccessReview).
VALIDATE_AS: dict[str, Any] | None = None


def payload(name: str) -> bytes:
    """An example review, moved into the bench namespace."""
    review = json.loads((EXAMPLES / name).read_text())
    request = review["request"]
    request["namespace"] = NS
    if VALIDATE_AS is not None and name.startswith("create-"):
        request["userInfo"] = VALIDATE_AS
    for key in ("object", "oldObject"):
        meta = (request.get(key) or {}).get("metadata")
        if isinstance(meta, dict) and "namespace" in meta:
            meta["namespace"] = NS
    return json.dumps(review).encode()


def store_backends(api: Any) -> int:
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=NS))
    )
    custom = client.CustomObjectsApi(api)
    stored = 0
    for file_name, doc in sample_backends():
        if file_name in BACKEND_SAMPLES:
            body = copy.deepcopy(doc)
            body["metadata"]["namespace"] = NS
            custom.create_namespaced_custom_object(
                "inferencecache.io", "v1alpha1", NS, "cachebackends", body
            )
            stored += 1
    return stored


def grant_workloads(api: Any, user: str) -> None:
    """Let ``user`` create Deployments, StatefulSets and Pods in the bench namespace,
    so the webhook's SubjectAccessReviews for a --validate-as user allow."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        NS,
        {
            "metadata": {"name": "bench-workloads"},
            "rules": [
                {
                    "apiGroups": ["apps"],
                    "resources": ["deployments", "statefulsets"],
                    "verbs": ["create"],
                },
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        NS,
        {
            "metadata": {"name": "bench-workloads"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "bench-workloads",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def post(url: str, body: bytes, ctx: ssl.SSLContext) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, context=ctx, timeout=10) as reply:
        answer: dict[str, Any] = json.loads(reply.read())
    return answer


def check_answers(base: str, ca_pem: bytes) -> None:
    """The figures only mean something if the webhook really does the work."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    for label, path, example in ENDPOINTS:
        response = post(base + path, payload(example), ctx)["response"]
        if path == "/mutate--v1-pod" and "patch" not in response:
            raise SystemExit(f"{label}: the pod was not wired: {response}")
        if path.startswith("/validate") and not response["allowed"]:
            raise SystemExit(f"{label}: denied: {response}")


# --------------------------------------------------------------------------- #
# Load and figures
# --------------------------------------------------------------------------- #


@dataclass
class Figures:
    rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int
    cpu_us: float = 0.0  # server CPU (user+sys, all its processes) per request


def cpu_seconds(root: int) -> float:
    """User+sys CPU time of ``root`` and its descendants, from /proc."""
    total = 0
    for pid in process_tree(root):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measured(
    root: int, vegeta: Path, url: str, body: bytes, ca: Path, seconds: float, n: int, work: Path
) -> Figures:
    """Attack() plus the server's CPU per request: a figure a busy machine blurs less
    than req/s, since it does not depend on how much CPU the server was given."""
    before = cpu_seconds(root)
    figures = attack(vegeta, url, body, ca, seconds, n, work)
    if figures.requests:
        figures.cpu_us = (cpu_seconds(root) - before) / figures.requests * 1e6
    return figures


def attack(
    vegeta: Path,
    url: str,
    body: bytes,
    ca_file: Path,
    seconds: float,
    connections: int,
    work: Path,
) -> Figures:
    target = {
        "method": "POST",
        "url": url,
        "body": base64.b64encode(body).decode(),
        "header": {"Content-Type": ["application/json"]},
    }
    targets = work / "targets.json"
    targets.write_text(json.dumps(target) + "\n")
    results = work / "results.bin"
    # -rate=0 with fixed workers: closed loop, as many requests as the server answers.
    # HTTP/1.1 keep-alive (no h2): what uvicorn speaks; the floor is held to the same.
    subprocess.run(
        [
            str(vegeta),
            "attack",
            "-format=json",
            f"-targets={targets}",
            "-rate=0",
            f"-workers={connections}",
            f"-max-workers={connections}",
            f"-connections={connections}",
            f"-duration={seconds}s",
            "-keepalive=true",
            "-http2=false",
            f"-root-certs={ca_file}",
            "-timeout=10s",
            f"-output={results}",
        ],
        check=True,
    )
    out = subprocess.run(
        [str(vegeta), "report", "-type=json", str(results)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    report = json.loads(out)
    codes = report.get("status_codes") or {}
    ok = int(codes.get("200", 0))
    return Figures(
        rate=ok / (report["duration"] / 1e9) if report["duration"] else 0.0,
        p50_ms=report["latencies"]["50th"] / 1e6,
        p99_ms=report["latencies"]["99th"] / 1e6,
        errors=int(report["requests"]) - ok,
        requests=int(report["requests"]),
    )


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant (the uvicorn workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return sorted(out)


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def peak_rss(root: int) -> Iterator[dict[int, float]]:
    """Peak RSS (MiB) per process of ``root``'s tree while the block runs, sampled every
    50 ms: pid -> MiB, filled in as the block runs."""
    peak: dict[int, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            for pid in process_tree(root):
                peak[pid] = max(peak.get(pid, 0.0), rss_mib(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def run_floor(
    binary: Path, cp: ControlPlane, ca: CertificateAuthority, work: Path
) -> Iterator[str]:
    cert, key = ca.issue_serving(["127.0.0.1", "localhost"]).write(work, "floor")
    cfg = cp.configuration()
    port = free_port()
    log_path = work / "floor.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(binary),
                f"-addr=127.0.0.1:{port}",
                f"-tls-cert-file={cert}",
                f"-tls-key-file={key}",
                f"-apiserver={cp.server_url}",
                f"-apiserver-ca={cfg.ssl_ca_cert}",
                f"-client-cert={cfg.cert_file}",
                f"-client-key={cfg.key_file}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        wait_until(
            lambda: urllib.request.urlopen(f"{url}/healthz", context=ctx, timeout=2).status == 200,
            timeout=30,
            description="floor /healthz",
            abort=lambda: f"floor exited:\n{tail(log_path)}" if proc.poll() is not None else None,
        )
        yield url, proc.pid
    finally:
        terminate_process_group(proc)


def start_py_spy(
    out_dir: Path | None, label: str, pid: int, seconds: float
) -> subprocess.Popen[bytes] | None:
    """Sample the webhook (and its workers) while vegeta runs: a flat raw-stack file."""
    if out_dir is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    name = label.split()[0].lower()
    return subprocess.Popen(
        [
            shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--format",
            "raw",
            "--rate",
            "250",
            "--duration",
            str(max(1, int(seconds))),
            "--output",
            str(out_dir / f"{name}.txt"),
        ],
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per endpoint")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of unmeasured load")
    parser.add_argument(
        "--connections", type=int, default=8, help="vegeta workers = keep-alive connections"
    )
    parser.add_argument(
        "--webhook-workers",
        type=int,
        default=None,
        help="icache webhook --workers (default: the webhook's own default)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile the webhook with py-spy (pip install py-spy) under load: DIR/<endpoint>.txt",
    )
    parser.add_argument(
        "--validate-example",
        default=ENDPOINTS[0][2],
        help="examples/admission file for the validate route (default: a managed provider, "
        "created by a system:masters admin, for whom no SubjectAccessReview is made)",
    )
    parser.add_argument(
        "--validate-as",
        metavar="USER",
        help="send the validate payload as USER (groups: system:authenticated), granted "
        "create deployments/statefulsets/pods in the bench namespace: the webhook then "
        "asks SubjectAccessReviews (create deployments, create pods), each answer reused "
        "for --access-review-allowed-ttl (default 10 s; pass "
        "--webhook-arg=--access-review-allowed-ttl=0 to ask on every request)",
    )
    parser.add_argument(
        "--webhook-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra icache webhook argument, e.g. --webhook-arg=--access-review-allowed-ttl=10",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the Go floor")
    parser.add_argument(
        "--only", choices=["validate", "default", "pod"], action="append", help="endpoints to run"
    )
    args = parser.parse_args(argv)

    cache = cache_dir()
    vegeta = install_vegeta(cache)
    floor_bin = None if args.no_floor else build_floor(cache)
    endpoints = [
        (label, path, args.validate_example if path.startswith("/validate") else example)
        for label, path, example in ENDPOINTS
        if not args.only or label.split()[0].lower() in args.only
    ]

    cp = ControlPlane(audit=False)
    cp.start()
    work = Path(tempfile.mkdtemp(prefix="icache-bench-"))
    try:
        api = cp.api_client()
        install_crd(api)
        stored = store_backends(api)
        if args.validate_as:
            global VALIDATE_AS
            VALIDATE_AS = {"username": args.validate_as, "groups": ["system:authenticated"]}
            grant_workloads(api, args.validate_as)
        extra = list(args.webhook_arg)
        if args.webhook_workers is not None:
            extra += ["--workers", str(args.webhook_workers)]
        with run_webhook(cp.kubeconfig_path, extra) as hook, contextlib.ExitStack() as stack:
            ca_file = work / "ca.crt"
            ca_file.write_bytes(hook.ca_pem)
            floor_url, floor_pid = None, 0
            if floor_bin:
                floor_url, floor_pid = stack.enter_context(run_floor(floor_bin, cp, hook.ca, work))
            check_answers(hook.url, hook.ca_pem)
            if floor_url:
                check_floor = ssl.create_default_context(cadata=hook.ca_pem.decode())
                for _, path, example in endpoints:
                    post(floor_url + path, payload(example), check_floor)
            assert hook.proc is not None
            root = hook.proc.pid
            time.sleep(1.0)  # let the workers settle before the idle reading
            idle = {pid: rss_mib(pid) for pid in process_tree(root)}
            print(
                f"\n{len(endpoints)} endpoints, {args.connections} keep-alive TLS connections, "
                f"{args.duration:g} s each (+{args.warmup:g} s warm-up), "
                f"{stored} CacheBackends in namespace {NS!r}, CPUs {len(os.sched_getaffinity(0))}"
            )
            rows: list[tuple[str, Figures | None, Figures]] = []
            with peak_rss(root) as peak:
                for label, path, example in endpoints:
                    body = payload(example)
                    floor_fig = None
                    if floor_url:
                        if args.warmup:
                            attack(vegeta, floor_url + path, body, ca_file, args.warmup, 8, work)
                        floor_fig = measured(
                            floor_pid,
                            vegeta,
                            floor_url + path,
                            body,
                            ca_file,
                            args.duration,
                            args.connections,
                            work,
                        )
                    if args.warmup:
                        attack(vegeta, hook.url + path, body, ca_file, args.warmup, 8, work)
                    profiler = start_py_spy(args.py_spy, label, root, args.duration)
                    ours = measured(
                        root,
                        vegeta,
                        hook.url + path,
                        body,
                        ca_file,
                        args.duration,
                        args.connections,
                        work,
                    )
                    if profiler:
                        profiler.wait(timeout=60)
                    rows.append((label, floor_fig, ours))
            print_table(rows)
            print("\nRSS per webhook process (MiB): idle -> peak under load")
            for pid in sorted(set(idle) | set(peak)):
                role = "supervisor" if pid == root and len(idle) > 1 else "worker"
                print(
                    f"  pid {pid:7d} {role:10s} {idle.get(pid, 0):7.1f} -> {peak.get(pid, 0):7.1f}"
                )
    finally:
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def print_table(rows: list[tuple[str, Figures | None, Figures]]) -> None:
    print(
        f"\n{'endpoint':23s}| {'floor req/s':>11s} {'p50':>6s} {'p99':>6s} {'cpu/req':>8s} | "
        f"{'icache req/s':>12s} {'p50':>6s} {'p99':>6s} {'cpu/req':>8s} {'err':>3s} | "
        f"{'ratio':>5s} {'p99 x':>5s} {'cpu x':>5s}"
    )
    for label, floor, ours in rows:
        left = (
            f"{floor.rate:11.0f} {floor.p50_ms:4.1f}ms {floor.p99_ms:4.1f}ms {floor.cpu_us:6.0f}us"
            if floor
            else f"{'-':>11s} {'-':>6s} {'-':>6s} {'-':>8s}"
        )
        ratio = f"{ours.rate / floor.rate:5.2f}" if floor and floor.rate else "    -"
        p99x = f"{ours.p99_ms / floor.p99_ms:5.2f}" if floor and floor.p99_ms else "    -"
        cpux = f"{floor.cpu_us / ours.cpu_us:5.2f}" if floor and ours.cpu_us else "    -"
        print(
            f"{label:23s}| {left} | {ours.rate:12.0f} {ours.p50_ms:4.1f}ms {ours.p99_ms:4.1f}ms "
            f"{ours.cpu_us:6.0f}us {ours.errors:3d} | {ratio} {p99x} {cpux}"
        )
    print(
        "ratio = icache req/s / floor req/s (>= 1.0: as fast as the floor); "
        "p99 x = icache p99 / floor p99 (<= 1.0: no worse);\n"
        "cpu x = floor CPU per request / icache CPU per request (server processes only, "
        "user+sys; steadier than req/s on a shared machine)"
    )


if __name__ == "__main__":
    sys.exit(main())
