"""The alert rules of manifests/components/monitoring: promtool accepts them, each
alert has a unit test that fires and one that does not (`promtool test rules`), a
runbook in docs/operations/alerts.md, and reads only series docs/metrics.md lists; the
PrometheusRule is the plain rules file, wrapped; the ServiceMonitors find the metrics
Services the rules name as jobs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.metrics_doc import documented, family_of, metric_names, undocumented_labels

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "manifests" / "components" / "monitoring"
RULES = MONITORING / "prometheus-rules.yaml"
RULE_TESTS = REPO / "tests" / "monitoring" / "alerts-test.yaml"
RUNBOOKS = REPO / "docs" / "operations" / "alerts.md"
RUNBOOK_BASE = (
    "https://github.com/inference-cache/inference-cache/blob/main/docs/operations/alerts.md#"
)

# The alerts the operability brief asks for (each named for what it covers).
REQUIRED = {
    "InferenceCachePodWebhookFailingOpen",  # fail-open rate above a threshold, by reason
    "InferenceCacheWebhookOverloaded",  # 503 / overload rate
    "InferenceCacheWebhookAbsent",  # no ready webhook replica
    "InferenceCacheWebhookCertificateExpiring",  # under 14 days
    "InferenceCacheBackendNotReady",  # not Ready for 15 minutes, by reason
    "InferenceCacheBackendDegraded",  # NoKVEventsObserved, ReplicasUnavailable
    "InferenceCacheBackendT2Degraded",  # T2Degraded / t2 hit rate 0
    "InferenceCacheReconcileErrors",  # reconcile errors
    "InferenceCacheReconcileBackoff",  # backoff climbing
    "InferenceCacheWorkQueueGrowing",  # depth growing for 10 minutes
    "InferenceCacheNoDispatcherLeader",  # no leader for 2 minutes
    "InferenceCacheWorkerAbsent",  # worker absent
    "InferenceCacheOffloadAllocationFailures",  # vLLM's CPU tier refuses stores
}


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in _rules() if "alert" in rule}


def _promtool(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_accepts_the_rules(promtool_bin: Path) -> None:
    done = _promtool(promtool_bin, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_and_stays_quiet_in_promtool_unit_tests(promtool_bin: Path) -> None:
    done = _promtool(promtool_bin, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_not_firing_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test") or []:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = set(_alerts())
    assert alerts - firing == set(), "alerts without a firing test"
    assert alerts - quiet == set(), "alerts without a not-firing test"
    assert alerts >= REQUIRED


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    headings = {
        re.sub(r"[^a-z0-9-]", "", line[3:].strip().lower().replace(" ", "-"))
        for line in RUNBOOKS.read_text().splitlines()
        if line.startswith("## ")
    }
    sections = RUNBOOKS.read_text().split("\n## ")
    for name, rule in _alerts().items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"], name
        url = rule["annotations"]["runbook_url"]
        assert url == RUNBOOK_BASE + name.lower(), name
        assert name.lower() in headings, f"docs/operations/alerts.md has no section {name}"
        body = next(s for s in sections if s.startswith(name + "\n"))
        for part in ("**What it means.**", "**How to confirm.**", "**What to do.**"):
            assert part in body, f"{name}: runbook lacks {part}"


def test_rules_read_only_documented_series() -> None:
    docs = documented()
    for rule in _rules():
        for name in metric_names(rule["expr"]):
            assert family_of(name, docs), f"{rule.get('alert')}: {name} is not in docs/metrics.md"


def test_rules_filter_and_group_only_by_documented_labels() -> None:
    """A matcher or a grouping on a label the series does not carry selects nothing
    (or collapses what it should split), and the alert never fires: every label a
    rule filters or groups by is one docs/metrics.md lists for that series, or one the
    scrape adds (job, instance, namespace, pod)."""
    docs = documented()
    problems = [
        f"{rule.get('alert') or rule.get('record')}: {problem}"
        for rule in _rules()
        for problem in undocumented_labels(rule["expr"], docs)
    ]
    assert not problems, "\n".join(problems)


def test_the_label_check_catches_a_wrong_label() -> None:
    """The control: misspelt or misplaced labels, in matchers and in each grouping."""
    docs = documented()
    decisions = "inferencecache_pod_webhook_decisions_total"
    for expr in (
        f'sum(rate({decisions}{{outcom="fail_open"}}[5m]))',
        f"sum by (endpoint) (rate({decisions}[5m]))",
        f"sum(rate({decisions}[5m])) by (backend)",
        f"sum without (result) (rate({decisions}[5m]))",
        f"sum by (reason) (rate({decisions}[5m])) / ignoring (resaon) group_left sum(up)",
        "histogram_quantile(0.9, sum by (le) (rate(inferencecache_reconcile_total[5m])))",
    ):
        assert undocumented_labels(expr, docs), expr
    assert not undocumented_labels(
        "histogram_quantile(0.9, sum by (le, controller, job) "
        "(rate(inferencecache_reconcile_time_seconds_bucket[5m])))",
        docs,
    )


def test_the_prometheusrule_holds_exactly_the_plain_rules() -> None:
    """prometheusrule.yaml is generated from the rules file by `make manifests`."""
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text()), (
        "manifests/components/monitoring/prometheusrule.yaml is stale: run `make manifests`"
    )


def test_the_servicemonitors_select_the_metrics_services_the_rules_name() -> None:
    base = REPO / "manifests" / "base" / "metrics-services.yaml"
    services = {d["metadata"]["name"]: d for d in yaml.safe_load_all(base.read_text())}
    monitors = list(yaml.safe_load_all((MONITORING / "servicemonitors.yaml").read_text()))
    jobs = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    assert jobs == set(services), (
        "every rule job is a metrics Service, and every Service alerted on"
    )
    selected: set[str] = set()
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matches = [
            name
            for name, svc in services.items()
            if wanted.items() <= svc["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, (monitor["metadata"]["name"], matches)
        ports = {p["name"] for p in services[matches[0]]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports
        selected.add(matches[0])
    assert selected == set(services)


def test_the_webhook_scrape_does_not_depend_on_the_certificate_being_valid() -> None:
    """An expired serving certificate must still be scraped: a verifying scrape would
    fail and take the expiry gauge, and InferenceCacheWebhookCertificateExpiring,
    with it (the Helm chart's copy: tests/unit/install/test_helm_chart.py)."""
    monitors = {
        m["metadata"]["name"]: m
        for m in yaml.safe_load_all((MONITORING / "servicemonitors.yaml").read_text())
    }
    (endpoint,) = monitors["inference-cache-webhook"]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
