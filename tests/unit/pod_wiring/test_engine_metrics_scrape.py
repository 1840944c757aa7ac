"""The engine-metrics label and port annotations the Pod webhook stamps for the
PodMonitor ``inference-cache-engines`` (docs/decisions.md "The engines' own cache
numbers"; docs/api.md "Labels"): which pods carry them, which ports they name, and that
re-admission converges and fail-open clears them."""

from __future__ import annotations

from typing import Any

from shared import constants as c
from shared.pod_wiring import OUTCOME_FAIL_OPEN, OUTCOME_INJECTED, OUTCOME_SKIPPED, wire_pod
from tests.builders import CTX, annotations_of, assert_idempotent
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

SGLANG_IMAGE = "lmsysorg/sglang:v0.5.13"
SCRAPE = {c.ANNOTATION_METRICS_PORT, c.ANNOTATION_CACHE_METRICS_PORT}


def _scrape(pod: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    labels = pod["metadata"].get("labels") or {}
    ports = {k: v for k, v in annotations_of(pod).items() if k in SCRAPE}
    return labels.get(c.LABEL_METRICS), ports


def _sglang(*args: str) -> dict[str, Any]:
    return make_pod(make_container("sglang", SGLANG_IMAGE, args=["--model-path", "m", *args]))


def test_vllm_default_port_is_scraped() -> None:
    """vLLM serves /metrics (and LMCache's in-process series) on --port, 8000 by default."""
    result = wire_pod(make_pod(make_container(args=["--model", "m"])), [make_backend()], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert _scrape(result.pod) == ("engine", {c.ANNOTATION_METRICS_PORT: "8000"})
    assert_idempotent(result, [make_backend()], CTX)


def test_vllm_port_flag_in_either_form_last_wins() -> None:
    for args in (["--port", "9000"], ["--port=9000"], ["--port", "8001", "--port=9000"]):
        pod = make_pod(make_container(command=["vllm", "serve", "m"], args=args))
        result = wire_pod(pod, [make_backend()], CTX)
        assert _scrape(result.pod) == ("engine", {c.ANNOTATION_METRICS_PORT: "9000"}), args


def test_sglang_lmcache_scrapes_the_mp_worker_and_the_engine_only_with_enable_metrics() -> None:
    """LMCache's MP worker serves lmcache_mp_* on --prometheus-port (9090 by default);
    SGLang serves /metrics on --port (30000 by default) only with --enable-metrics,
    which the webhook does not add."""
    backends = [make_backend(runtime=c.RUNTIME_SGLANG)]
    plain = wire_pod(_sglang(), backends, CTX)
    assert plain.outcome == OUTCOME_INJECTED, plain.message
    assert _scrape(plain.pod) == ("engine", {c.ANNOTATION_CACHE_METRICS_PORT: "9090"})
    assert "--enable-metrics" not in plain.pod["spec"]["containers"][0]["args"]
    assert_idempotent(plain, backends, CTX)

    metered = wire_pod(_sglang("--enable-metrics", "--port", "31000"), backends, CTX)
    assert _scrape(metered.pod) == (
        "engine",
        {c.ANNOTATION_CACHE_METRICS_PORT: "9090", c.ANNOTATION_METRICS_PORT: "31000"},
    )
    defaulted = wire_pod(_sglang("--enable-metrics"), backends, CTX)
    assert _scrape(defaulted.pod)[1][c.ANNOTATION_METRICS_PORT] == "30000"


def test_sglang_hicache_without_enable_metrics_is_not_labelled() -> None:
    """No port to scrape: no label, so the PodMonitor does not select the pod."""
    backends = [
        make_backend(
            runtime=c.RUNTIME_SGLANG, type_=c.TYPE_SGLANG_HICACHE, hiCache={"ratio": "2.0"}
        )
    ]
    result = wire_pod(_sglang(), backends, CTX)
    assert result.outcome == OUTCOME_INJECTED, result.message
    assert _scrape(result.pod) == (None, {})
    metered = wire_pod(_sglang("--enable-metrics"), backends, CTX)
    assert _scrape(metered.pod) == ("engine", {c.ANNOTATION_METRICS_PORT: "30000"})


def test_a_template_carrying_the_label_and_ports_is_cleared_when_not_wired() -> None:
    """Fail-open, opt-out and events-only pods are never scraped as a backend's engines,
    whatever their template says."""
    stale_labels = {"app": "engine", c.LABEL_METRICS: "engine"}
    stale = {c.ANNOTATION_METRICS_PORT: "8000", c.ANNOTATION_CACHE_METRICS_PORT: "9090"}
    no_match = wire_pod(
        make_pod(labels={**stale_labels, "app": "other"}, annotations=stale), [make_backend()], CTX
    )
    assert no_match.outcome == OUTCOME_FAIL_OPEN
    assert _scrape(no_match.pod) == (None, {})
    skipped = wire_pod(
        make_pod(labels=stale_labels, annotations={**stale, c.ANNOTATION_SKIP_INJECT: "true"}),
        [make_backend()],
        CTX,
    )
    assert skipped.outcome == OUTCOME_SKIPPED
    assert _scrape(skipped.pod) == (None, {})
    events_only = wire_pod(
        make_pod(labels=stale_labels, annotations=stale),
        [make_backend(integration={"mode": "EventsOnly"})],
        CTX,
    )
    assert events_only.outcome == OUTCOME_INJECTED, events_only.message
    assert _scrape(events_only.pod) == (None, {})


def test_an_unparsable_port_is_not_recorded() -> None:
    """A --port value that is no TCP port records no port (the PodMonitor's keep rule
    would drop the target anyway), and the label goes with it."""
    pod = make_pod(make_container(args=["--port", "$(PORT)"]))
    result = wire_pod(pod, [make_backend()], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert _scrape(result.pod) == (None, {})


def test_vllm_engine_shares_one_prometheus_multiprocess_directory() -> None:
    """vLLM's /metrics serves only its API-server process's registry unless
    PROMETHEUS_MULTIPROC_DIR is set; LMCache records in the other processes. The
    webhook sets LMCache's own default directory, and keeps the pod's own."""
    result = wire_pod(make_pod(), [make_backend()], CTX)
    env = {e["name"]: e.get("value") for e in result.pod["spec"]["containers"][0]["env"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/tmp/lmcache_prometheus"
    own = {"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/metrics-dir"}
    kept = wire_pod(make_pod(make_container(env=[own])), [make_backend()], CTX)
    engine_env = kept.pod["spec"]["containers"][0]["env"]
    assert [e for e in engine_env if e["name"] == "PROMETHEUS_MULTIPROC_DIR"] == [own]
    sglang = wire_pod(_sglang(), [make_backend(runtime=c.RUNTIME_SGLANG)], CTX)
    for container in sglang.pod["spec"]["containers"]:
        assert "PROMETHEUS_MULTIPROC_DIR" not in {e["name"] for e in container.get("env") or []}
