"""docs/metrics.md is the list of every series (the scrape, alert and dashboard tests
read it): its rows parse, our series are all inferencecache_* (besides the standard
process_* and python_*), and the PromQL reader finds exactly the selected names."""

from __future__ import annotations

from tests.metrics_doc import documented, exposition, family_of, metric_names


def test_every_series_of_ours_is_in_the_one_namespace_with_a_known_type() -> None:
    docs = documented()
    ours = [d for d in docs.values() if d.ours]
    assert len(ours) > 30
    for series in ours:
        assert series.name.startswith(("inferencecache_", "process_", "python_")), series
        assert series.type in {"counter", "gauge", "histogram"}, series
        if series.type == "counter":
            assert series.name.endswith("_total"), series
    assert not [d for d in docs.values() if d.name.startswith("icache_")]


def test_the_doc_names_the_controller_runtime_series() -> None:
    """The work-queue and reconcile series carry controller-runtime's names and labels."""
    docs = documented()
    for name, labels in {
        "inferencecache_workqueue_depth": {"name"},
        "inferencecache_workqueue_adds_total": {"name"},
        "inferencecache_workqueue_queue_duration_seconds": {"name"},
        "inferencecache_workqueue_work_duration_seconds": {"name"},
        "inferencecache_workqueue_unfinished_work_seconds": {"name"},
        "inferencecache_workqueue_longest_running_processor_seconds": {"name"},
        "inferencecache_reconcile_total": {"controller", "result"},
        "inferencecache_reconcile_errors_total": {"controller"},
        "inferencecache_reconcile_time_seconds": {"controller"},
        "inferencecache_active_workers": {"controller"},
        "inferencecache_max_concurrent_reconciles": {"controller"},
    }.items():
        assert labels <= docs[name].labels, name


def test_metric_names_skips_functions_keywords_labels_and_durations() -> None:
    expr = (
        'sum by (reason) (rate(inferencecache_pod_webhook_decisions_total{outcome="fail_open",'
        'reason!~"no_match|x"}[5m])) / ignoring(reason) group_left '
        "sum(rate(inferencecache_webhook_admissions_total[5m] offset 1h)) > 0.05 "
        'and on (job) absent(up{job="a b"} == 1) or vector(0) '
        "unless histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[$__rate_interval])))"
    )
    assert metric_names(expr) == {
        "inferencecache_pod_webhook_decisions_total",
        "inferencecache_webhook_admissions_total",
        "up",
        "x_seconds_bucket",
    }
    assert metric_names("time() - 14 * 86400 + 1e3") == set()


def test_histogram_sub_series_belong_to_their_documented_family() -> None:
    docs = documented()
    hist = "inferencecache_reconcile_time_seconds"
    assert family_of(f"{hist}_bucket", docs) == hist
    assert family_of(f"{hist}_count", docs) == hist
    assert family_of("inferencecache_reconcile_total_count", docs) is None


def test_exposition_reads_types_samples_and_label_names() -> None:
    text = (
        "# HELP a_total x\n# TYPE a_total counter\n"
        'a_total{x="1",y="q\\"z"} 3.0\n'
        "# TYPE h_seconds histogram\n"
        'h_seconds_bucket{le="+Inf",c="k"} 1.0\nh_seconds_sum{c="k"} 2\nh_seconds_count{c="k"} 1\n'
        "# TYPE empty gauge\n"
    )
    families = exposition(text)
    assert families["a_total"].labels == {"x", "y"}
    assert families["h_seconds"].labels == {"c"}
    assert families["h_seconds"].samples == 3
    assert families["empty"].samples == 0
