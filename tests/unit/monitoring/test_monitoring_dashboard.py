"""The Grafana dashboard (manifests/components/monitoring/dashboard.json): it has the
panels an operator looks for, every query names only series docs/metrics.md lists,
every query parses (promtool checks each as a recording rule), and the rendered
install carries it as a ConfigMap Grafana's sidecar loads."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.metrics_doc import documented, family_of, labels_of, metric_names, undocumented_labels

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "manifests" / "components" / "monitoring" / "dashboard.json"
RENDERED = REPO / "manifests" / "rendered" / "install-monitoring.yaml"

# Panel titles for what the dashboard must show.
REQUIRED_PANELS = {
    "Admissions by route and outcome",
    "Pod wiring outcomes",
    "Fail-open reasons",
    "Admission latency p50 / p99",
    "Overload",
    "Certificate expiry",
    "CacheBackends by Ready reason",
    "LMCache client/server version skew",
    "Reconcile rate",
    "Reconcile latency p50 / p99",
    "Reconcile errors and retries",
    "Queue depth and in-flight",
    "Leader",
    # the engines' own view of the tier, a row per CacheBackend
    "Offload hit ratio",
    "Tokens served from the tier",
    "Remote tier errors",
    # vLLM's own CPU offloading (VLLMOffloading)
    "vLLM CPU offload: refused and skipped stores",
    "vLLM CPU offload: tier pinned by transfers",
}
# Grafana's built-in variables, as Prometheus would see them once Grafana fills them.
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    # the dashboard's own variable, which the Engines row repeats over
    "$cachebackend": "cache",
}


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels") or [])
    return out


def _queries() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in _panels(_dashboard())
        for target in panel.get("targets") or []
    ]


def _as_prometheus(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr!r}"
    return expr


def test_the_dashboard_has_every_panel_and_a_datasource_variable() -> None:
    dashboard = _dashboard()
    titles = {panel["title"] for panel in _panels(dashboard)}
    assert REQUIRED_PANELS - titles == set()
    assert dashboard["uid"] == "inference-cache"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [panel["id"] for panel in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in _panels(dashboard):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel.get("targets"), panel["title"]


def test_every_query_names_only_documented_series() -> None:
    docs = documented()
    for title, expr in _queries():
        names = metric_names(_as_prometheus(expr))
        assert names, f"{title}: no series in {expr!r}"
        for name in names:
            assert family_of(name, docs), f"panel {title!r} reads {name}, not in docs/metrics.md"


def test_every_query_filters_and_groups_only_by_documented_labels() -> None:
    """A panel filtering or grouping by a label its series do not carry shows nothing
    or one lumped line; the legend's {{label}}s must be labels of the query's series.
    Documented labels, or those the scrape adds (job, instance, namespace, pod)."""
    docs = documented()
    problems: list[str] = []
    for panel in _panels(_dashboard()):
        for target in panel.get("targets") or []:
            expr = _as_prometheus(target["expr"])
            problems += [f"{panel['title']}: {p}" for p in undocumented_labels(expr, docs)]
            carried = set().union(*(labels_of(n, docs) for n in metric_names(expr)))
            for label in re.findall(
                r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", target.get("legendFormat", "")
            ):
                if label not in carried:
                    problems.append(
                        f"{panel['title']}: legend {{{{{label}}}}} is no label of its series"
                    )
    assert not problems, "\n".join(problems)


def test_every_query_parses(promtool_bin: Path, tmp_path: Path) -> None:
    """Each expression as a recording rule: `promtool check rules` parses and
    type-checks it the way Prometheus will."""
    rules = [
        {"record": f"dashboard:query_{index}", "expr": _as_prometheus(expr)}
        for index, (_, expr) in enumerate(_queries())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [str(promtool_bin), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(rules)} rules found" in done.stdout


def test_a_broken_query_is_refused_by_the_parse_check(promtool_bin: Path, tmp_path: Path) -> None:
    """The parse check can fail: promtool rejects what Prometheus would."""
    path = tmp_path / "bad.yaml"
    bad = {"record": "x:y", "expr": "sum by (le (rate(inferencecache_reconcile_total[5m]))"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [bad]}]}))
    done = subprocess.run(
        [str(promtool_bin), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0


def test_the_install_carries_the_dashboard_as_a_sidecar_configmap() -> None:
    docs = [d for d in yaml.safe_load_all(RENDERED.read_text()) if d]
    maps = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "inference-cache-dashboard"
    ]
    assert len(maps) == 1
    assert maps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    (content,) = maps[0]["data"].values()
    assert json.loads(content) == _dashboard()
    assert re.fullmatch(r"[a-z0-9-]+\.json", next(iter(maps[0]["data"])))
