"""The Pod webhook answers before the API server gives up on it.

The webhook runs in live mode with a kubeconfig pointing at a loopback proxy in front
of the real API server. With the proxy holding answers back longer than the webhook's
timeoutSeconds (5), a pod creation must still come back admitted, unwired, well inside
those 5 s, and the reason (`list_error`) must show in the log and the metrics.
"""

from __future__ import annotations

import json
import re
import ssl
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from shared import constants as c
from tests.builders import pod
from tests.delay_proxy import delay_proxy
from tests.harness.controlplane import ControlPlane, wait_until
from tests.webhook_process import WebhookProcess, labelled_namespace, registered, run_webhook

SUFFIX = "slow-api"
WEBHOOK_TIMEOUT_SECONDS = 5  # the Pod webhook's timeoutSeconds in the configurations
GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"


def _list_error_count(hook: WebhookProcess) -> float:
    ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
    text = urllib.request.urlopen(f"{hook.url}/metrics", context=ctx, timeout=5).read().decode()
    match = re.search(
        r'inferencecache_pod_webhook_decisions_total\{outcome="fail_open",reason="list_error"\} (\S+)',
        text,
    )
    return float(match.group(1)) if match else 0.0


def test_slow_apiserver_pod_is_admitted_unwired_inside_the_webhook_timeout(
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
    cachebackend_crd: dict[str, Any],
    tmp_path: Path,
) -> None:
    upstream = ("127.0.0.1", int(control_plane.server_url.rsplit(":", 1)[1]))
    core: Any = client.CoreV1Api(kube_api_client)
    with delay_proxy(upstream) as proxy:
        kubeconfig = control_plane.write_kubeconfig(
            tmp_path / "kubeconfig", server=f"https://127.0.0.1:{proxy.port}"
        )
        hook: WebhookProcess
        with run_webhook(kubeconfig) as hook, registered(kube_api_client, hook, SUFFIX):
            ns = labelled_namespace(kube_api_client, f"slow-{uuid.uuid4().hex[:6]}", SUFFIX)
            client.CustomObjectsApi(kube_api_client).create_namespaced_custom_object(
                GROUP,
                VERSION,
                ns,
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "CacheBackend",
                    "metadata": {"name": "vllm"},
                    "spec": {
                        "engineSelector": {"matchLabels": {"app": "vllm-slow"}},
                        "runtime": "VLLM",
                        "lmCache": {"hostMemory": {"capacity": "8Gi"}},
                    },
                },
            )

            def wires() -> bool:
                probe = pod(
                    name=f"probe-{uuid.uuid4().hex[:5]}",
                    labels={"app": "vllm-slow"},
                    namespace=None,
                )
                got = core.create_namespaced_pod(ns, probe, dry_run="All")
                return c.ANNOTATION_INJECTED_BY in (got.metadata.annotations or {})

            # Through the proxy at full speed the backend is found and the pod wired.
            wait_until(wires, timeout=30, description="the Pod webhook wiring via the proxy")

            proxy.delay = 3 * WEBHOOK_TIMEOUT_SECONDS
            before = _list_error_count(hook)
            started = time.monotonic()
            created = core.create_namespaced_pod(
                ns, pod(name="engine-0", labels={"app": "vllm-slow"}, namespace=None)
            )
            elapsed = time.monotonic() - started

            assert elapsed < WEBHOOK_TIMEOUT_SECONDS - 1, f"admission took {elapsed:.2f}s"
            assert c.ANNOTATION_INJECTED_BY not in (created.metadata.annotations or {})
            assert _list_error_count(hook) == before + 1
            lines = [json.loads(line) for line in hook.log_path.read_text().splitlines()]
            assert any(
                line.get("reason") == "list_error" and line.get("outcome") == "fail_open"
                for line in lines
            ), hook.log_path.read_text()[-2000:]
