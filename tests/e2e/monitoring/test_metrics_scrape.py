"""docs/metrics.md is the truth about /metrics: every real process (the webhook with
one worker and with two, the dispatcher, the worker) is driven through real work on
the real API server and Redis, then scraped. Any series it exposes that the page
does not list for it (or with a label the page does not list) fails, and so does any
series the page lists that its process (each webhook among them) does not expose
with at least one sample."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
import uuid
from contextlib import ExitStack

import pytest
from kubernetes import client

from tests.e2e.conftest import Cluster, Stack, create_pod, poll
from tests.harness.controlplane import ControlPlane, free_port
from tests.metrics_doc import OUR_PROCESSES, Documented, Family, documented, exposition
from tests.webhook_process import WebhookProcess, labelled_namespace, registered, run_webhook

EVENTS_ONLY = {
    "runtime": "VLLM",
    "integration": {"mode": "EventsOnly"},
    "engineSelector": {"matchLabels": {"app": "scrape"}},
    "observation": {"modelID": "m"},
}
PATH_MUTATE_POD = "/mutate--v1-pod"


def _get(url: str, ctx: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        return str(resp.read().decode())


def _scrape_webhook(hook: WebhookProcess) -> dict[str, Family]:
    ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
    return exposition(_get(f"{hook.url}/metrics", ctx))


def _post_garbage(hook: WebhookProcess) -> None:
    """A body that is not an AdmissionReview: counted as a bad request (400)."""
    ctx = ssl.create_default_context(cadata=hook.ca_pem.decode())
    request = urllib.request.Request(
        hook.url + PATH_MUTATE_POD,
        data=b"{not json",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, context=ctx, timeout=10).close()
    assert refused.value.code == 400


def _counted(text: str, name: str) -> bool:
    """Some sample of counter ``name`` is above zero (its children start at zero)."""
    return any(
        line.startswith((name + "{", name + " ")) and float(line.rsplit(None, 1)[1]) > 0
        for line in text.splitlines()
    )


def _undocumented(
    process: str, families: dict[str, Family], docs: dict[str, Documented]
) -> list[str]:
    problems = []
    for name, family in sorted(families.items()):
        doc = docs.get(name)
        if doc is None or process not in doc.processes:
            problems.append(f"{process} exposes {name}, which docs/metrics.md does not list for it")
            continue
        if family.type != doc.type:
            problems.append(f"{name} is a {family.type}, docs/metrics.md says {doc.type}")
        extra = family.labels - doc.labels
        if extra:
            problems.append(f"{name} has labels {sorted(extra)} docs/metrics.md does not list")
    return problems


def test_every_process_exposes_exactly_the_series_docs_metrics_md_lists(
    cluster: Cluster,
    stack: Stack,
    control_plane: ControlPlane,
    kube_api_client: client.ApiClient,
) -> None:
    docs = documented()
    dport, wport = free_port(), free_port()
    stack.start_dispatcher(extra=["--metrics-port", str(dport)])
    stack.start_worker(extra=["--metrics-port", str(wport)])
    suffix = f"scrape-{uuid.uuid4().hex[:6]}"
    with ExitStack() as resources:
        hook = resources.enter_context(
            run_webhook(control_plane.kubeconfig_path, ["--workers", "1"])
        )
        hooks = resources.enter_context(
            run_webhook(control_plane.kubeconfig_path, ["--workers", "2"])
        )
        resources.enter_context(registered(kube_api_client, hook, suffix))
        ns = labelled_namespace(kube_api_client, suffix, suffix)
        cluster.namespaces.append(ns)

        # Real work for every process: a CacheBackend through both CacheBackend routes,
        # engine pods through the Pod route, a bad body, a reconcile, the leader's
        # per-backend gauges (the t2 rate as the snapshot poller writes it).
        cluster.create_cb(ns, "cb", EVENTS_ONLY)
        create_pod(cluster, ns, "engine", {}, labels={"app": "scrape"})
        create_pod(cluster, ns, "other", {}, labels={"app": "unrelated"})
        _post_garbage(hook)
        _post_garbage(hooks)
        cluster.wait_cb(
            ns, "cb", lambda o: bool((o.get("status") or {}).get("conditions")), "conditions"
        )
        cluster.patch_cb(
            ns, "cb", {"status": {"indexParticipation": {"prefixCount": 1, "t2HitRate": "0"}}},
            status=True,
        )  # fmt: skip
        backend = f'backend="{ns}/cb"'

        def dispatcher_sees_backend() -> dict[str, Family] | None:
            text = _get(f"http://127.0.0.1:{dport}/metrics")
            wanted = ("inferencecache_backend_t2_hit_rate{", "inferencecache_backend_condition{")
            if all(
                any(line.startswith(w) and backend in line for line in text.splitlines())
                for w in wanted
            ):
                return exposition(text)
            return None

        scrapes = {
            "dispatcher": poll(
                dispatcher_sees_backend, timeout=60, what="the leader's backend gauges"
            ),
            "worker": poll(
                lambda: (
                    exposition(text)
                    if _counted(
                        text := _get(f"http://127.0.0.1:{wport}/metrics"),
                        "inferencecache_reconcile_total",
                    )
                    else None
                ),
                timeout=60,
                what="a finished reconcile",
            ),
            "webhook": _scrape_webhook(hook),
        }
        workers_scrape = poll(
            lambda: (
                f
                if (f := _scrape_webhook(hooks)).get("python_gc_collections_total")
                and f.get("inferencecache_webhook_certificate_expiry_timestamp_seconds")
                else None
            ),
            timeout=30,
            what="the two-worker webhook's GC counters and certificate expiry",
        )

    problems: list[str] = []
    for process, families in scrapes.items():
        problems += _undocumented(process, families, docs)
    problems += _undocumented("webhook", workers_scrape, docs)
    # "Exposes" means at least one sample: a TYPE line alone (a labelled family with
    # no child yet) is not a series Prometheus stores. The two-worker webhook is held
    # to the whole list too: with several workers /metrics carries only what some
    # worker wrote to the shared files.
    exposing = {**scrapes, "two-worker webhook": workers_scrape}
    for doc in docs.values():
        processes = sorted(doc.processes & OUR_PROCESSES)
        if "webhook" in processes:
            processes.append("two-worker webhook")
        for process in processes:
            family = exposing[process].get(doc.name)
            if family is None or not family.samples:
                problems.append(
                    f"docs/metrics.md lists {doc.name} for {process}, which does not expose it"
                )
    assert not problems, "\n".join(problems)

    # The samples behind the alerts are there, with the values the work produced.
    assert scrapes["dispatcher"]["inferencecache_leader_election_master_status"].samples == 1
    assert (
        scrapes["webhook"]["inferencecache_webhook_certificate_expiry_timestamp_seconds"].samples
        == 1
    )
    assert scrapes["webhook"]["inferencecache_pod_webhook_decisions_total"].samples >= 1
