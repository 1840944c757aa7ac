"""The alerts fire on what the real processes expose, for the faults they are for.

A real stack (webhook over TLS, dispatcher, worker, API server, Redis) is put into
four faults at once: a fail-open storm (the webhook's identity may not list
CacheBackends, so every engine pod is admitted unwired with `list_error`), a serving
certificate that expires in under 14 days (the harness issues 7-day ones), a
CacheBackend stuck not Ready (its Deployment never becomes available: no
controller-manager), and a worker killed. The test scrapes every process once per
step, as Prometheus would (adding `job` and `instance`, and `up`: 0 when the scrape
fails), and hands the samples to `promtool test rules` one step a minute apart,
starting at the real time of the first scrape. The rules are the shipped rules with
their annotations left out (their templates are checked in
tests/monitoring/alerts-test.yaml); what is asserted is which alerts fire, with
which labels, and that the leader and webhook alerts stay quiet.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import ssl
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from icache_install import certs
from tests.e2e.conftest import Cluster, Stack, create_pod, poll
from tests.harness.controlplane import ControlPlane, free_port
from tests.webhook_process import labelled_namespace, registered, run_webhook

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "manifests" / "components" / "monitoring" / "prometheus-rules.yaml"
STUCK = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
    "engineSelector": {"matchLabels": {"app": "alerts"}},
}
STEPS = 17  # minutes on the promtool timeline: enough for the 15-minute not-Ready alert
KILL_AT = 11


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class Timeline:
    """Samples by series, one value per step (``_``: not scraped at that step). With
    ``backends``, the per-CacheBackend series of other backends (other tests' on the
    shared API server) are left out."""

    def __init__(self, backends: str | None = None) -> None:
        self.values: dict[str, list[str]] = {}
        self.steps = 0
        self.started = time.time()
        self.backends = backends

    def _put(self, series: str, value: float) -> None:
        column = self.values.setdefault(series, ["_"] * self.steps)
        column.append(repr(float(value)))

    def step(self, targets: dict[tuple[str, str], str | None]) -> None:
        """One scrape of every target (job, instance): its text, or None if it failed."""
        if self.steps == 0:
            self.started = time.time()
        for (job, instance), text in targets.items():
            base = {"job": job, "instance": instance}
            self._put(
                f"up{{job={_quote(job)},instance={_quote(instance)}}}", 0 if text is None else 1
            )
            for family in text_string_to_metric_families(text or ""):
                for sample in family.samples:
                    backend = sample.labels.get("backend")
                    if self.backends and backend and not backend.startswith(self.backends):
                        continue
                    labels = {**sample.labels, **base}
                    rendered = ",".join(f"{k}={_quote(v)}" for k, v in sorted(labels.items()))
                    self._put(f"{sample.name}{{{rendered}}}", sample.value)
        self.steps += 1
        for column in self.values.values():
            column.extend(["_"] * (self.steps - len(column)))

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": s, "values": " ".join(v)} for s, v in sorted(self.values.items())]

    def series(self, name: str) -> list[str]:
        return [s for s in self.values if s.startswith(name + "{")]


def _scrape(url: str, ctx: ssl.SSLContext | None = None) -> str | None:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def _rules_without_annotations(tmp_path: Path) -> Path:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


def _alert_test(
    tmp_path: Path, timeline: Timeline, expected: list[tuple[str, list[dict[str, str]]]]
) -> Path:
    """A `promtool test rules` file: the shipped rules on the scraped timeline, with the
    alerts expected at its last step."""
    test_file = tmp_path / "alerts-from-real-scrapes.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(_rules_without_annotations(tmp_path))],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "name": "real scrapes",
                        "interval": "1m",
                        "start_timestamp": str(int(timeline.started)),
                        "input_series": timeline.input_series(),
                        "alert_rule_test": [
                            {
                                "eval_time": f"{timeline.steps - 1}m",
                                "alertname": name,
                                "exp_alerts": [{"exp_labels": labels} for labels in alerts],
                            }
                            for name, alerts in expected
                        ],
                    }
                ],
            }
        )
    )
    return test_file


def _promtool(promtool_bin: Path, test_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool_bin), "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_alerts_fire_on_a_fail_open_storm_a_short_certificate_a_stuck_backend_and_a_killed_worker(
    cluster: Cluster,
    stack: Stack,
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
    promtool_bin: Path,
    tmp_path: Path,
) -> None:
    dport, wport = free_port(), free_port()
    stack.start_dispatcher(extra=["--metrics-port", str(dport)])
    worker = stack.start_worker(extra=["--metrics-port", str(wport)])
    # A webhook whose identity RBAC allows nothing: every backend LIST is refused.
    nobody = control_plane.write_kubeconfig(
        tmp_path / "nobody.kubeconfig", control_plane.client_keypair("icache-test:nobody")
    )
    suffix = f"alerts-{uuid.uuid4().hex[:6]}"
    with (
        run_webhook(nobody, ["--workers", "1"]) as hook,
        registered(kube_api_client, hook, suffix),
    ):
        ns = labelled_namespace(kube_api_client, suffix, suffix)
        cluster.namespaces.append(ns)
        # The stuck backend lives where the webhook is not registered (its CacheBackend
        # routes would refuse the write: they cannot list either).
        stuck_ns = cluster.namespace()
        cluster.create_cb(stuck_ns, "stuck", STUCK)
        backend = f'backend="{stuck_ns}/stuck"'
        poll(
            lambda: any(
                line.startswith("inferencecache_backend_condition{") and backend in line
                for line in (_scrape(f"http://127.0.0.1:{dport}/metrics") or "").splitlines()
            ),
            timeout=60,
            what="the stuck backend's conditions on the leader",
        )
        ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
        timeline = Timeline(backends=f"{stuck_ns}/")
        for step in range(STEPS):
            if step == KILL_AT:
                worker.kill(signal.SIGKILL)
            for i in range(2):  # the storm: engine pods keep coming
                create_pod(cluster, ns, f"engine-{step}-{i}", {}, labels={"app": "vllm"})
            timeline.step(
                {
                    ("inference-cache-webhook-metrics", hook.url.removeprefix("https://")): _scrape(
                        f"{hook.url}/metrics", ctx
                    ),
                    ("inference-cache-dispatcher-metrics", f"127.0.0.1:{dport}"): _scrape(
                        f"http://127.0.0.1:{dport}/metrics"
                    ),
                    ("inference-cache-worker-metrics", f"127.0.0.1:{wport}"): _scrape(
                        f"http://127.0.0.1:{wport}/metrics"
                    ),
                }
            )

    # The stuck backend's Ready reason, as scraped (it must not have changed: `for`
    # restarts with a new reason).
    not_ready = [
        s
        for s in timeline.series("inferencecache_backend_condition")
        if backend in s and 'type="Ready"' in s and 'status="True"' not in s
    ]
    assert len(not_ready) == 1, not_ready
    assert "_" not in timeline.values[not_ready[0]], "the reason changed during the run"
    reason = not_ready[0].split('reason="', 1)[1].split('"', 1)[0]
    assert reason != "ScaledToZero"

    expected: list[tuple[str, list[dict[str, str]]]] = [
        ("InferenceCachePodWebhookFailingOpen", [{"severity": "warning", "reason": "list_error"}]),
        (
            "InferenceCacheWebhookCertificateExpiring",
            [{"severity": "warning", "job": "inference-cache-webhook-metrics"}],
        ),
        (
            "InferenceCacheBackendNotReady",
            [{"severity": "warning", "backend": f"{stuck_ns}/stuck", "reason": reason}],
        ),
        ("InferenceCacheWorkerAbsent", [{"severity": "critical"}]),
        # and what must stay quiet while all that happens
        ("InferenceCacheWebhookAbsent", []),
        ("InferenceCacheNoDispatcherLeader", []),
    ]
    done = _promtool(promtool_bin, _alert_test(tmp_path, timeline, expected))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def _scrape_error(url: str, ctx: ssl.SSLContext) -> str | None:
    """Why a scrape failed (None: it succeeded)."""
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            resp.read()
        return None
    except OSError as exc:
        return str(exc)


def test_an_expired_serving_certificate_is_scraped_and_fires_the_expiry_alert(
    control_plane: ControlPlane, promtool_bin: Path, tmp_path: Path
) -> None:
    """The serving certificate in use has already expired: a scrape that verifies it
    fails (as the API server's calls do), the ServiceMonitor's scrape, which does not
    verify it, still reads the expiry gauge, and InferenceCacheWebhookCertificateExpiring
    fires on it while the webhook is not reported absent."""
    with run_webhook(control_plane.kubeconfig_path, ["--workers", "1"]) as hook:
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
        expired = certs.issue_serving(
            hook.ca.key_pair, ["127.0.0.1", "localhost"], long_ago, days=1
        )
        for path, pem in ((hook.key_path, expired.key_pem), (hook.cert_path, expired.cert_pem)):
            staged = path.with_suffix(".new")
            staged.write_bytes(pem)
            os.replace(staged, path)  # the webhook reloads a changed pair within 0.5 s
        url = f"{hook.url}/metrics"
        verifying = ssl.create_default_context(cadata=hook.ca_pem.decode())
        # What the ServiceMonitor does: TLS without verifying the certificate.
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        poll(
            lambda: (error := _scrape_error(url, verifying)) and "expired" in error,
            timeout=30,
            what="the webhook serving the expired certificate",
        )
        expiry = "inferencecache_webhook_certificate_expiry_timestamp_seconds"
        scraped = _scrape(url, unverified) or ""
        (value,) = [
            float(line.split()[-1]) for line in scraped.splitlines() if line.startswith(expiry)
        ]
        assert value < time.time() - 28 * 86400
        job = "inference-cache-webhook-metrics"
        instance = hook.url.removeprefix("https://")
        timeline = Timeline()
        for _ in range(7):  # the rule's `for: 5m`, one scrape a promtool minute
            text = _scrape(url, unverified)
            assert text is not None, "the unverified scrape failed"
            timeline.step({(job, instance): text})

    expected: list[tuple[str, list[dict[str, str]]]] = [
        ("InferenceCacheWebhookCertificateExpiring", [{"severity": "warning", "job": job}]),
        ("InferenceCacheWebhookAbsent", []),
    ]
    done = _promtool(promtool_bin, _alert_test(tmp_path, timeline, expected))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
