"""Never adopt or overwrite, in the reconcile shell: a rendered name taken by a foreign
object is reported (Ready=False/NameConflict, a Warning Event, a requeue) and nothing
is written — to it or to anything else of the backend — until it goes away.

The real-API-server proof is tests/e2e/reconcile/test_name_conflicts.py; these pin the shell's
decisions on a fake.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from reconciler.status.ownership import NAME_CONFLICT_REQUEUE_SECONDS
from tests.builders import status_backend
from tests.fakes import FakeKube, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
NAME = "cb-lmcache-server"
OWNED = ("deployments", "statefulsets", "services", "horizontalpodautoscalers")


# The backend the tests reconcile: a Managed LMCacheServer tier that autoscales.
AUTOSCALED: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
    "autoscaling": {"minReplicas": 1, "maxReplicas": 3},
}


def foreign(plural: str, kind: str, name: str = NAME, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"foreign-{kind}", **meta},
        "spec": {"team": "theirs"},
    }


def ready(kube: FakeKube) -> dict[str, Any]:
    status = kube.objects[("cachebackends", "ns", "cb")]["status"]
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def owned_writes(kube: FakeKube) -> list[tuple[str, str, str]]:
    return [w for w in kube.writes if w[1] in OWNED]


def test_a_foreign_service_blocks_every_write_and_is_reported_once() -> None:
    """A CacheBackend named chat never takes over a team's existing chat-redis Service:
    the foreign object is left untouched and the backend says so."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(AUTOSCALED), uid="cb-uid"))
    theirs = foreign("services", "Service")
    kube.put("services", theirs)
    before = copy.deepcopy(theirs)
    rec = in_process_reconciler(kube, clock=lambda: NOW)

    result = rec.reconcile("ns/cb")
    assert kube.objects[("services", "ns", NAME)] == before
    # Held as a unit: neither the Service nor the Deployment nor the HPA is written.
    assert owned_writes(kube) == []
    assert ready(kube)["status"] == "False"
    assert ready(kube)["reason"] == "NameConflict"
    assert f"Service {NAME}" in ready(kube)["message"]
    status = kube.objects[("cachebackends", "ns", "cb")]["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NameConflict")
    assert "endpoint" not in status, "never publish a foreign Service as our endpoint"
    assert ("create", "events", "NameConflict") in kube.writes
    assert result.requeue_after == NAME_CONFLICT_REQUEUE_SECONDS

    # Unchanged conflict: no status patch, no second Event, still a requeue.
    kube.writes.clear()
    again = rec.reconcile("ns/cb")
    assert kube.writes == []
    assert again.requeue_after == NAME_CONFLICT_REQUEUE_SECONDS

    # The foreign object goes away: the next reconcile converges.
    del kube.objects[("services", "ns", NAME)]
    rec.reconcile("ns/cb")
    assert {(w[0], w[1]) for w in owned_writes(kube)} == {
        ("apply", "deployments"),
        ("apply", "services"),
        ("apply", "horizontalpodautoscalers"),
    }
    assert ready(kube)["reason"] == "RolloutInProgress"
    assert kube.objects[("cachebackends", "ns", "cb")]["status"]["endpoint"].startswith(NAME)


def test_a_predecessors_object_is_foreign_until_garbage_collected() -> None:
    """Same labels, controller reference to an earlier CacheBackend of the same name
    (deleted and recreated; the GC has not run yet): not ours to adopt."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(AUTOSCALED), uid="cb-uid"))
    stale = foreign(
        "deployments",
        "Deployment",
        labels={"inferencecache.io/cachebackend": "cb"},
        ownerReferences=[
            {"apiVersion": "inferencecache.io/v1alpha1", "kind": "CacheBackend",
             "name": "cb", "uid": "old-uid", "controller": True}
        ],
    )  # fmt: skip
    kube.put("deployments", stale)
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    assert owned_writes(kube) == []
    assert "controlled by CacheBackend/cb" in ready(kube)["message"]


def test_an_object_we_control_but_that_lost_our_labels_is_updated_not_a_conflict() -> None:
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(AUTOSCALED), uid="cb-uid"))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    svc = kube.objects[("services", "ns", NAME)]
    svc["metadata"]["labels"] = {}
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert ("apply", "services", NAME) in kube.writes
    assert ready(kube)["reason"] != "NameConflict"


def test_shedding_never_deletes_a_foreign_object_with_our_labels() -> None:
    """A mode flip sheds what we own; a same-named object that merely copies our
    labels (no controller reference to us) is not ours to delete."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(AUTOSCALED), uid="cb-uid"))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    labels = dict(kube.objects[("deployments", "ns", NAME)]["metadata"]["labels"])
    lookalike = foreign("statefulsets", "StatefulSet", labels=labels)
    kube.put("statefulsets", lookalike)
    cb = kube.objects[("cachebackends", "ns", "cb")]
    cb["spec"] = {"runtime": "VLLM", "integration": {"mode": "EventsOnly"}}
    cb["metadata"]["generation"] = 2
    kube.writes.clear()
    rec.reconcile("ns/cb")
    deletes = {w for w in kube.writes if w[0] == "delete"}
    assert deletes == {
        ("delete", p, NAME)
        for p in ("networkpolicies", "deployments", "services", "horizontalpodautoscalers")
    }
    assert kube.objects[("statefulsets", "ns", NAME)] == lookalike


def test_while_conflicted_nothing_owned_is_shed_either() -> None:
    """Deployment → StatefulSet with a foreign StatefulSet of the name: keep the owned
    Deployment (shedding it would leave the backend with no workload at all)."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(AUTOSCALED), uid="cb-uid"))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    kube.put("statefulsets", foreign("statefulsets", "StatefulSet"))
    cb = kube.objects[("cachebackends", "ns", "cb")]
    cb["spec"] = {**cb["spec"], "deploymentKind": "StatefulSet"}
    cb["metadata"]["generation"] = 2
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert owned_writes(kube) == []
    assert ("deployments", "ns", NAME) in kube.objects
    assert f"StatefulSet {NAME}" in ready(kube)["message"]
