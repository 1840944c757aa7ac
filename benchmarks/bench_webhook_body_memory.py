"""Peak memory and time per request body: the numbers behind the webhook's body limit.

For each route and a bare list, starts a fresh `icache webhook --insecure` (embedded
mode), posts ONE body of ``[{},{},...]`` (the most Python objects per JSON byte) just
under ``--size`` bytes, carried where each route keeps it (a CacheBackend spec field, a
Pod spec field), and prints the process's peak RSS growth (VmHWM in /proc) divided by
the body size: the per-byte factor docs/install.md ("Webhook memory") multiplies the
in-flight budget by.

    .venv/bin/python benchmarks/bench_webhook_body_memory.py [--size 1048576]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.harness.controlplane import free_port, wait_until  # noqa: E402

ICACHE = str(Path(sys.executable).parent / "icache")

CACHEBACKEND = (
    '{"request":{"uid":"bench","operation":"CREATE","namespace":"default","object":'
    '{"apiVersion":"inferencecache.io/v1alpha1","kind":"CacheBackend",'
    '"metadata":{"name":"x"},"spec":{"runtime":"VLLM","junk":"@@"}}}}'
)
POD = (
    '{"request":{"uid":"bench","operation":"CREATE","namespace":"default","object":'
    '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"vllm-llama"}},'
    '"spec":{"containers":[{"name":"vllm","image":"vllm/vllm-openai"}],"junk":"@@"}}}}'
)
CASES = {
    "parse only (bare list, 400)": ("/validate-inferencecache-io-v1alpha1-cachebackend", '"@@"'),
    "validate CacheBackend": ("/validate-inferencecache-io-v1alpha1-cachebackend", CACHEBACKEND),
    "mutate CacheBackend": ("/mutate-inferencecache-io-v1alpha1-cachebackend", CACHEBACKEND),
    "mutate Pod": ("/mutate--v1-pod", POD),
}


def _fill(template: str, size: int) -> bytes:
    room = size - len(template) - 16
    return template.replace('"@@"', "[" + ",".join(["{}"] * (room // 3)) + "]").encode()


def _memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    rss, hwm = (int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))
    return rss, hwm


def measure(path: str, body: bytes, size: int) -> tuple[int, float, int, int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            ICACHE,
            "webhook",
            "--insecure",
            f"--port={port}",
            f"--backends-from={ROOT / 'manifests' / 'samples'}",
            f"--max-body-bytes={size}",
            f"--max-inflight-bytes={size}",
            "--shutdown-drain-seconds=0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: urllib.request.urlopen(f"{url}/healthz", timeout=2).status == 200,
            timeout=30,
            description="webhook up",
        )
        baseline_rss, baseline_hwm = _memory(proc.pid)
        request = urllib.request.Request(url + path, data=body, method="POST")
        started = time.perf_counter()
        try:
            status = urllib.request.urlopen(request, timeout=300).status
        except urllib.error.HTTPError as exc:
            status = exc.code
        elapsed = time.perf_counter() - started
        _, peak = _memory(proc.pid)
        return status, elapsed, baseline_rss, peak - baseline_hwm
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024 * 1024, help="body size in bytes")
    args = parser.parse_args()
    print(f"body: {args.size / 2**20:.2f} MiB of [{{}},{{}},...]")
    print(f"{'case':32} {'HTTP':>4} {'seconds':>8} {'base MiB':>9} {'peak +MiB':>10} {'x body':>7}")
    for name, (path, template) in CASES.items():
        body = _fill(template, args.size)
        status, elapsed, base, growth = measure(path, body, args.size)
        print(
            f"{name:32} {status:>4} {elapsed:>8.2f} {base / 2**20:>9.0f} "
            f"{growth / 2**20:>10.0f} {growth / len(body):>7.0f}"
        )


if __name__ == "__main__":
    main()
