"""The engines' metric names the monitoring bundle reads are the pinned releases' own
(docs/metrics.md "Engine series"; docs/decisions.md "The engines' own cache numbers"):
every engine series a rule or the dashboard names is exported by at least one pinned
release, each per-CacheBackend recording rule yields a value at each pin set
(``SAMPLE_TARGETS``, ``NEWEST``), the hit ratio reads the offload tier's counters and
never the GPU prefix cache, and the scrape ports the webhook records are the releases'
defaults. The rules of vLLM's own CPU offloading (type VLLMOffloading) read names that
vLLM 0.33.0 and 0.34.0, the releases that type wires, both export, and only there
must they yield a value. A renamed metric fails here, not on a dashboard."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.engine_versions import LMCACHE, NEWEST, SAMPLE_TARGETS, SGLANG, VLLM, ReleaseSet
from shared.runtime_adapters import metrics_ports
from tests.engine_contracts.cache import SOURCES, require_release
from tests.engine_contracts.metric_names import engine_names, exported_series, otel_series
from tests.engine_contracts.source import SourceTree
from tests.metrics_doc import metric_names

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "components" / "monitoring"
RULES = MONITORING / "prometheus-rules.yaml"
DASHBOARD = MONITORING / "dashboard.json"
ENGINE_GROUP = "inference-cache.engines"
PIN_SETS = {"SAMPLE_TARGETS": SAMPLE_TARGETS, "NEWEST": NEWEST}
# The per-backend offload hit figures: read the tier's own counters only.
HIT_RULES = (
    "inferencecache:offload_lookup_tokens:rate5m",
    "inferencecache:offload_hit_tokens:rate5m",
)
GPU_PREFIX_CACHE = re.compile(r"^(vllm:(gpu_)?prefix_cache_|sglang:cache_hit_rate)")
# vLLM's own CPU offloading (VLLMOffloading): the releases its wiring is proved against
# (tests/engine_contracts/offloading/test_native_offload_source.py), and the figures the
# rules carry, by the engine series each reads.
NATIVE_OFFLOAD_RELEASES = ("0.33.0", "0.34.0")
NATIVE_OFFLOAD_RULES = {
    "inferencecache:offload_allocation_failures:rate5m": "vllm:kv_offload_allocation_failure_total",
    "inferencecache:offload_stores_skipped:rate5m": "vllm:kv_offload_stores_skipped_total",
    "inferencecache:offload_cpu_cache_usage": "vllm:kv_offload_cpu_cache_usage_perc",
}
NATIVE_OFFLOAD_ALERT = "InferenceCacheOffloadAllocationFailures"


@cache
def tree(package: str, version: str) -> SourceTree:
    return SourceTree(require_release(package, version) / SOURCES, f"{package} {version}")


@cache
def exports(package: str, version: str) -> frozenset[str]:
    return exported_series(tree(package, version), (package,))


def set_exports(pinned: ReleaseSet, prefix: str = "") -> frozenset[str]:
    """Every engine series a pin set's releases export (``prefix``: only those)."""
    names = exports(VLLM, pinned.vllm) | exports(SGLANG, pinned.sglang)
    names |= exports(LMCACHE, pinned.lmcache)
    return frozenset(n for n in names if n.startswith(prefix))


def runtime_exports(pinned: ReleaseSet, runtime: str) -> frozenset[str]:
    """What a backend of ``runtime`` scrapes at a pin set: vLLM's /metrics carries
    vLLM's and LMCache's in-process series; beside SGLang, LMCache runs as the MP worker."""
    lm = exports(LMCACHE, pinned.lmcache)
    if runtime == VLLM:
        return exports(VLLM, pinned.vllm) | {n for n in lm if n.startswith("lmcache:")}
    return exports(SGLANG, pinned.sglang) | {n for n in lm if n.startswith("lmcache_mp_")}


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _recorded() -> dict[str, str]:
    return {r["record"]: r["expr"] for r in _rules() if "record" in r}


def _inputs(expr: str) -> set[str]:
    """The engine series an expression reads, through the recording rules it names."""
    recorded = _recorded()
    names: set[str] = set()
    for name in metric_names(expr):
        names |= _inputs(recorded[name]) if name in recorded else engine_names({name})
    return names


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for top in dashboard["panels"] for p in [top, *(top.get("panels") or [])]]
    return [t["expr"] for p in panels for t in p.get("targets") or []]


def _engine_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (group,) = [g for g in groups if g["name"] == ENGINE_GROUP]
    return list(group["rules"])


def test_every_engine_series_read_is_exported_by_a_pinned_release() -> None:
    pinned = set_exports(SAMPLE_TARGETS) | set_exports(NEWEST)
    read: dict[str, set[str]] = {}
    for where, expr in [
        *((r.get("record") or r["alert"], r["expr"]) for r in _rules()),
        *(("dashboard", e) for e in _dashboard_exprs()),
    ]:
        for name in engine_names(metric_names(expr)):
            read.setdefault(name, set()).add(where)
    assert read, "no rule or panel reads an engine series"
    missing = {name: sorted(places) for name, places in read.items() if name not in pinned}
    assert not missing, f"not exported by any pinned release: {missing}"


@pytest.mark.parametrize("pin_set", sorted(PIN_SETS))
def test_each_recording_rule_yields_a_value_at_each_pin_set(pin_set: str) -> None:
    """At least one of the names each rule falls back over is exported at the set."""
    exported = set_exports(PIN_SETS[pin_set])
    records = [
        r for r in _engine_rules() if "record" in r and r["record"] not in NATIVE_OFFLOAD_RULES
    ]
    assert {r["record"] for r in records} >= {*HIT_RULES, "inferencecache:offload_hit_ratio:rate5m"}
    for rule in records:
        inputs = _inputs(rule["expr"])
        assert inputs & exported, f"{rule['record']}: none of {sorted(inputs)} at {pin_set}"


@pytest.mark.parametrize("pin_set", sorted(PIN_SETS))
@pytest.mark.parametrize("runtime", [VLLM, SGLANG])
def test_the_hit_ratio_is_computable_for_each_runtime_at_each_pin_set(
    pin_set: str, runtime: str
) -> None:
    exported = runtime_exports(PIN_SETS[pin_set], runtime)
    for record in HIT_RULES:
        inputs = _inputs(_recorded()[record])
        assert inputs & exported, f"{record}: nothing a {runtime} backend exports at {pin_set}"


@pytest.mark.parametrize("version", NATIVE_OFFLOAD_RELEASES)
def test_the_native_offload_rules_read_what_each_wired_vllm_release_exports(version: str) -> None:
    """Each VLLMOffloading figure reads exactly its vLLM series, exported by the release
    (declared as Offloading*Metadata in the connector's and the CPU spec's metrics);
    the hit figures of such a backend (no LMCache) fall back to vLLM's connector
    counters, which the release exports too."""
    exported = exports(VLLM, version)
    recorded = _recorded()
    for record, series in NATIVE_OFFLOAD_RULES.items():
        assert record in recorded, record
        assert _inputs(recorded[record]) == {series}, record
        assert series in exported, f"{record}: vLLM {version} exports no {series}"
    for record in HIT_RULES:
        assert _inputs(recorded[record]) & exported, f"{record}: nothing at vLLM {version}"


def test_every_vllm_offload_series_read_is_in_both_wired_releases() -> None:
    """Every ``vllm:kv_offload_*`` and ``vllm:external_prefix_cache_*`` name a rule or a
    panel reads is exported by vLLM 0.33.0 and by 0.34.0; the alert on allocation
    failures reads the failure counter."""
    read = {
        name
        for expr in [*(r["expr"] for r in _rules()), *_dashboard_exprs()]
        for name in _inputs(expr)
        if name.startswith(("vllm:kv_offload_", "vllm:external_prefix_cache_"))
    }
    assert read >= set(NATIVE_OFFLOAD_RULES.values())
    for version in NATIVE_OFFLOAD_RELEASES:
        missing = read - exports(VLLM, version)
        assert not missing, f"vLLM {version} does not export {sorted(missing)}"
    (alert,) = [r for r in _rules() if r.get("alert") == NATIVE_OFFLOAD_ALERT]
    assert _inputs(alert["expr"]) == {"vllm:kv_offload_allocation_failure_total"}


def test_the_vllm_offload_names_are_read_through_their_declarations() -> None:
    """The control: the names come from the Offloading*Metadata declarations (a counter
    gets _total, a gauge not), a near miss is not found, and vLLM 0.11.0 has none."""
    newest = exports(VLLM, NEWEST.vllm)
    assert "vllm:kv_offload_allocation_failure_total" in newest
    assert "vllm:kv_offload_cpu_cache_usage_perc" in newest
    for near_miss in (
        "vllm:kv_offload_allocation_failure",
        "vllm:kv_offload_allocation_failures_total",
        "vllm:kv_offload_cpu_cache_usage_perc_total",
        "vllm:kv_offload_stores_skipped",
    ):
        assert near_miss not in newest, near_miss
    assert not {n for n in exports(VLLM, "0.11.0") if n.startswith("vllm:kv_offload_")}


def test_the_hit_figures_read_the_offload_tier_never_the_gpu_prefix_cache() -> None:
    for record in (*HIT_RULES, "inferencecache:offload_hit_ratio:rate5m"):
        inputs = _inputs(_recorded()[record])
        assert inputs, record
        assert not [n for n in inputs if GPU_PREFIX_CACHE.match(n)], record


def test_a_renamed_or_unsuffixed_name_is_not_found() -> None:
    """The control: the check tells exported names from near misses (a counter without
    its _total, the OpenTelemetry name without its unit, a renamed series)."""
    pinned = set_exports(SAMPLE_TARGETS) | set_exports(NEWEST)
    assert "lmcache:num_lookup_hits_total" in pinned
    for near_miss in (
        "lmcache:num_lookup_hits",
        "lmcache:num_lookup_hit_total",
        "lmcache_mp_lookup_hit_total",
        "vllm:external_prefix_cache_hits",
    ):
        assert near_miss not in pinned, near_miss
    assert "vllm:external_prefix_cache_hits_total" not in exports(VLLM, SAMPLE_TARGETS.vllm)


def test_the_opentelemetry_names_map_as_the_exporter_does() -> None:
    """The mapping checked against opentelemetry-exporter-prometheus 0.50b0 and
    0.61b0 (the range LMCache allows): dots to underscores, unit, then _total."""
    assert otel_series("lmcache_mp.lookup_hit", "tokens", "counter") == {
        "lmcache_mp_lookup_hit_tokens_total"
    }
    assert otel_series("lmcache_mp.timeouts", None, "counter") == {"lmcache_mp_timeouts_total"}
    assert otel_series("a.b", "s", "gauge") == {"a_b_seconds"}


def _text(package: str, version: str) -> str:
    return tree(package, version).text


@pytest.mark.parametrize("pin_set", sorted(PIN_SETS))
def test_the_scrape_ports_are_the_releases_defaults(pin_set: str) -> None:
    """metrics_ports' defaults and flags: vLLM's --port, SGLang's --port and
    --enable-metrics, the LMCache MP worker's --prometheus-port and --disable-metrics."""
    pinned = PIN_SETS[pin_set]
    vllm = _text(VLLM, pinned.vllm)
    assert re.search(rf"\bport: int = {metrics_ports.VLLM_DEFAULT_PORT}\b", vllm)
    sglang = _text(SGLANG, pinned.sglang)
    assert re.search(rf"\bport\b[^=\n]*= {metrics_ports.SGLANG_DEFAULT_PORT}\b", sglang)
    assert '"--enable-metrics"' in sglang or re.search(r"\benable_metrics\b[^=\n]*=", sglang)
    mp_config = tree(LMCACHE, pinned.lmcache).module_path("lmcache.v1.mp_observability.config")
    assert mp_config is not None
    config = mp_config.read_text()
    flag = config.index(f'"{metrics_ports.LMCACHE_MP_PROMETHEUS_PORT}"')
    default = re.search(r"default=(\d+)", config[flag:])
    assert default is not None
    assert int(default.group(1)) == metrics_ports.LMCACHE_MP_DEFAULT_PROMETHEUS_PORT
    assert f'"{metrics_ports.LMCACHE_MP_DISABLE_METRICS}"' in config


@pytest.mark.parametrize("pin_set", sorted(PIN_SETS))
def test_vllm_and_lmcache_read_the_multiprocess_directory_the_webhook_sets(pin_set: str) -> None:
    """vLLM collects every process's series only with PROMETHEUS_MULTIPROC_DIR set, and
    LMCache's own default directory is the one the webhook sets."""
    pinned = PIN_SETS[pin_set]
    prometheus = tree(VLLM, pinned.vllm).module_path("vllm.v1.metrics.prometheus")
    assert prometheus is not None
    assert 'os.getenv("PROMETHEUS_MULTIPROC_DIR")' in prometheus.read_text()
    observability = tree(LMCACHE, pinned.lmcache).module_path("lmcache.observability")
    assert observability is not None
    assert f'"{metrics_ports.LMCACHE_PROMETHEUS_DIR}"' in observability.read_text()


def test_prometheus_client_exposes_a_counter_with_total_and_a_gauge_as_named() -> None:
    """The prometheus_client rule the name reader applies, checked on the library: a
    Counter ``lmcache:num_lookup_tokens`` is scraped as ``..._total``, a Gauge as is."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    registry = CollectorRegistry()
    Counter("lmcache:num_lookup_tokens", "d", ["model_name"], registry=registry).labels("m").inc()
    Gauge("lmcache:put_failed_count", "d", registry=registry).set(2)
    text = generate_latest(registry).decode()
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert "lmcache:num_lookup_tokens_total" in samples
    assert "lmcache:put_failed_count" in samples
    assert "lmcache:num_lookup_tokens" not in samples
