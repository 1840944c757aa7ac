"""What the certs integration tests share: the webhook configurations' API paths,
``icache`` run as a process, and a TLS webhook started on the certificates
``icache certs`` wrote."""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

from kubeio.client import Kube
from tests.harness.controlplane import (
    ControlPlane,
    spawn_in_own_group,
    terminate_process_group,
    wait_until,
)
from tests.samples import ROOT

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CONFIG_PATHS = {
    "MutatingWebhookConfiguration": f"{ADMISSION}/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": f"{ADMISSION}/validatingwebhookconfigurations",
}


def cachebackends(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def icache(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icache_cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _get(url: str, ca_file: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
        return int(resp.status)


def start_webhook(
    control_plane: ControlPlane, cert_dir: Path, port: int, log_path: Path
) -> subprocess.Popen[bytes]:
    proc = spawn_in_own_group(
        [
            sys.executable,
            "-m",
            "icache_cli.main",
            "webhook",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--tls-cert-file={cert_dir / 'tls.crt'}",
            f"--tls-key-file={cert_dir / 'tls.key'}",
            f"--kubeconfig={control_plane.kubeconfig_path}",
        ],
        log_path,
        ROOT,
    )

    def died() -> str | None:
        if proc.poll() is None:
            return None
        return f"webhook exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"

    try:
        wait_until(
            lambda: _get(f"https://127.0.0.1:{port}/healthz", cert_dir / "ca.crt") == 200,
            timeout=60,
            description="icache webhook /healthz over TLS",
            abort=died,
        )
    except BaseException:
        terminate_process_group(proc)
        raise
    return proc


def secret_data(kube: Kube, namespace: str, name: str) -> tuple[str, dict[str, str]]:
    raw = kube.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    return raw["type"], raw["data"]
