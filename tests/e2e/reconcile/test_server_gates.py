"""The worker against a stub cache-index server: /snapshot feeds the KV-event gate,
/probe drives FunctionalProbeOK (docs/server-contract.md shapes, bearer token)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kubeio import client as k
from tests.e2e.conftest import Cluster, Stack, condition, poll
from tests.e2e.workloads import hold_pool, open_pool, wait_rolled_out
from tests.fakes import QuietHandler


class StubServer:
    def __init__(self) -> None:
        self.probe_response: dict[str, Any] = {"ingest": "ok", "routing": "ok", "t2": "skipped"}
        self.snapshot_response: dict[str, Any] = {"replicas": [], "tenants": []}
        self.probes: list[tuple[dict[str, Any], str | None]] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(QuietHandler):
            def _send(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - http.server names
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with stub.lock:
                    stub.probes.append((body, self.headers.get("Authorization")))
                    response = dict(stub.probe_response, backend=body.get("backend"))
                self._send(response)

            def do_GET(self) -> None:  # noqa: N802 - http.server names
                with stub.lock:
                    response = stub.snapshot_response
                self._send(response)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.fixture
def stub_server() -> Iterator[StubServer]:
    s = StubServer()
    yield s
    s.close()


@pytest.mark.real_controllers
def test_snapshot_poller_and_functional_probe_gate(
    cluster: Cluster, stack: Stack, stub_server: StubServer, tmp_path: Path
) -> None:
    """Spec, Composition order: managed-readiness → KV-event gate → functional-probe
    gate; no probe before the upstream gates pass (the Deployment really rolling out
    first), then the probe's per-stage outcome drives FunctionalProbeOK and Ready."""
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    stack.start_dispatcher()
    stack.start_worker(
        extra=[
            "--server-url", stub_server.url,
            "--token-path", str(token),
            "--probe-interval", "1",
            "--snapshot-interval", "0.5",
        ]
    )  # fmt: skip
    ns = cluster.namespace()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "engine-0", "labels": {"app": "vllm"}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
    }
    # The harness creates each namespace's default ServiceAccount shortly after.
    poll(lambda: cluster.kube.create(k.PODS, ns, pod), timeout=30, what="engine pod created")
    cluster.create_cb(
        ns,
        "cb",
        {
            "runtime": "VLLM",
            "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            "engineSelector": {"matchLabels": {"app": "vllm"}},
            "observation": {"modelID": "Qwen/Qwen3"},
            # No node is in this pool yet: the rollout stays in flight until one joins.
            "template": {"nodeSelector": hold_pool(ns)},
        },
    )
    cluster.wait_condition(ns, "cb", "Ready", "False", "RolloutInProgress")
    assert condition(cluster.cb(ns, "cb"), "FunctionalProbeOK") is None
    open_pool(cluster, ns)
    wait_rolled_out(cluster, ns, "Deployment", "cb-lmcache-server")
    obj = cluster.wait_condition(ns, "cb", "Ready", "False", "AwaitingFirstKVEvent")
    assert obj["status"]["matchedEnginePods"] == 1
    assert condition(obj, "FunctionalProbeOK") is None, "no probe before the upstream gate passes"

    with stub_server.lock:
        stub_server.probe_response = {
            "ingest": "ok",
            "routing": "failed",
            "t2": "skipped",
            "errors": [{"stage": "routing", "message": "synthesized prefix not routed"}],
        }
        stub_server.snapshot_response = {
            "replicas": [
                {"replicaId": "engine-0", "tenant": ns, "prefixCount": 42, "lastEventAt": "2026-01-01T00:00:00Z",
                 "t2HitTokens": 0, "t2QueryTokens": 10},
            ],
        }  # fmt: skip
    obj = cluster.wait_condition(ns, "cb", "Ready", "False", "ProbeRoutingFailed", timeout=30)
    assert obj["status"]["indexParticipation"] == {
        "prefixCount": 42,
        "lastEventAt": "2026-01-01T00:00:00Z",
        "t2HitRate": "0",
    }
    assert obj["status"]["firstKVEventObservedAt"]
    assert condition(obj, "FunctionalProbeOK") == ("False", "ProbeRoutingFailed")
    assert condition(obj, "T2Degraded") == ("True", "T2ZeroHitRate")
    assert condition(obj, "Degraded") == ("False", "NotDegraded")

    with stub_server.lock:
        stub_server.probe_response = {"ingest": "ok", "routing": "ok", "t2": "skipped"}
    obj = cluster.wait_condition(ns, "cb", "Ready", "True", "KVEventsObserved", timeout=30)
    assert condition(obj, "FunctionalProbeOK") == ("True", "ProbeOK")
    # Backends other tests left in the shared control plane are probed too: ours is
    # the one named after this namespace.
    with stub_server.lock:
        body, auth = [p for p in stub_server.probes if p[0].get("backend") == f"{ns}/cb"][-1]
    assert body == {
        "backend": f"{ns}/cb",
        "model": "Qwen/Qwen3",
        "hashScheme": "vllm",
        "backendType": "LMCache",
    }
    assert auth == "Bearer secret-token"

    # The replicas drain: prefixCount resets, the latched gate stays Ready.
    with stub_server.lock:
        stub_server.snapshot_response = {"replicas": []}
    obj = cluster.wait_cb(
        ns, "cb", lambda o: o["status"]["indexParticipation"] == {"prefixCount": 0}, "drained"
    )
    # The write-once firstKVEventObservedAt latch keeps the drained backend Ready.
    assert condition(obj, "Ready") == ("True", "KVEventsObserved")
