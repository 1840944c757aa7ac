"""`icache webhook` as a process: plain-HTTP replay with curl-like clients, and TLS reload.

docs/architecture.md "Contracts": `icache webhook --insecure --port N --backends-from
DIR` serves plain HTTP with CacheBackends from YAML files; TLS files are reloaded when
they change.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builders import admission_review, pod
from tests.harness.controlplane import free_port, tail, terminate_process_group, wait_until
from tests.samples import ROOT, SAMPLES_DIR
from tests.webhook_process import run_webhook, served_serial

ICACHE = str(Path(sys.executable).parent / "icache")
EXAMPLES = ROOT / "examples" / "admission"


@pytest.fixture(scope="module")
def insecure_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    backends = tmp_path_factory.mktemp("backends")
    for sample in SAMPLES_DIR.glob("*.yaml"):
        shutil.copy(sample, backends / sample.name)
    port = free_port()
    log_path = backends.parent / "webhook.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                ICACHE,
                "webhook",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--backends-from",
                str(backends),
                "--kvevent-subscriber-image",
                "ghcr.io/inference-cache/kvevent-subscriber:0.1.0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200,
            timeout=30,
            description="icache webhook --insecure",
            abort=lambda: tail(log_path) if proc.poll() is not None else None,
        )
        yield url
    finally:
        terminate_process_group(proc)


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.json"))


def test_examples_exist() -> None:
    assert len(_examples()) >= 20


@pytest.mark.parametrize("example", _examples(), ids=[p.stem for p in _examples()])
def test_examples_replay_over_plain_http(insecure_webhook: str, example: Path) -> None:
    """Every shipped example replays: the answer is an AdmissionReview with the request uid."""
    review: dict[str, Any] = json.loads(example.read_text())
    kind = review["request"].get("kind", {}).get("kind", "CacheBackend")
    if kind == "Pod":
        path = "/mutate--v1-pod"
    elif example.stem.startswith("mutate"):
        path = "/mutate-inferencecache-io-v1alpha1-cachebackend"
    else:
        path = "/validate-inferencecache-io-v1alpha1-cachebackend"
    response = httpx.post(insecure_webhook + path, json=review, timeout=5)
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]


def test_pod_replay_uses_embedded_backends_and_subscriber(insecure_webhook: str) -> None:
    engine = pod(labels={"app": "vllm-llama"}, namespace=None, generate_name="vllm-")
    review = admission_review(engine, uid="pod-1")
    body = httpx.post(insecure_webhook + "/mutate--v1-pod", json=review, timeout=5).json()
    ops = json.loads(base64.b64decode(body["response"]["patch"]))
    added = json.dumps(ops)
    assert "kvevent-subscriber" in added
    assert "default/vllm-host-only" in added


def test_tls_certificate_is_reloaded_without_restart() -> None:
    """TLS reloaded when the files change (cert-manager rotation)."""
    with run_webhook(extra_args=["--backends-from", str(SAMPLES_DIR)]) as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        first = served_serial(port, hook.ca_pem)
        cert, key = hook.ca.issue_serving(["127.0.0.1"]).write(hook.cert_path.parent, "rotated")
        # Rename over the served files, as kubelet's atomic Secret volume update does.
        key.replace(hook.key_path)
        cert.replace(hook.cert_path)
        second = wait_until(
            lambda: (s := served_serial(port, hook.ca_pem)) != first and s,
            timeout=20,
            description="rotated certificate served",
        )
        assert second != first
