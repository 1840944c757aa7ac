"""status.observedServerInstance and the engine cascade-restart: the pure decisions.

The identifier is ``<pod-uid>:<restart-sum>`` per Ready cache-server pod, comma-joined
and sorted by pod name. It is a *baseline* the controller anchors the cascade on, not
a live view (spec "Status", observedServerInstance row):

- ``observed_server_instance_transition`` decides the next baseline and whether the
  change is an actual replacement of the server (cascade) — see its docstring for the
  table of transitions;
- ``deployment_converged`` is the convergence test that lets a strict-superset
  (scale-up) be persisted;
- ``cascade_targets`` names the engine Deployments to restart: those owning, through a
  ReplicaSet, a pod that carries this backend's injected-by + matching injected-by-uid;
- ``restart_trigger_patch`` is the pod-template annotation patch, the mechanism of
  ``kubectl rollout restart``.

Rate limiting and the writes are the reconcile shell's.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from reconciler.status.engine_pods import ServerPod
from reconciler.status.observed import WorkloadObservation
from shared import constants as c
from shared.backend_keys import injected_by_backend
from shared.objects import meta

CASCADE_WINDOW_SECONDS: Final = 30.0


class Why(enum.StrEnum):
    UNCHANGED = "unchanged"
    UNAVAILABLE = "unavailable"  # no Ready pod: keep the prior value
    BASELINE = "baseline"  # empty → set: never cascades
    REPLACEMENT = "replacement"  # a prior pod is gone, or its restart-sum advanced
    SCALE_UP = "scale-up"  # strict superset on a converged workload: persisted
    MIDPOINT = "midpoint"  # strict superset mid-rollout: not persisted
    NOT_READY = "not-ready"  # a prior pod still exists but is not Ready: keep


@dataclass(frozen=True)
class InstanceTransition:
    value: str
    cascade: bool
    why: Why


def format_server_instance(pods: Sequence[ServerPod]) -> str:
    """``uid:restarts`` of each Ready pod, sorted by pod name, comma-joined."""
    ready = sorted((p for p in pods if p.ready), key=lambda p: p.name)
    return ",".join(f"{p.uid}:{p.restarts}" for p in ready)


def parse_server_instance(value: str | None) -> dict[str, int] | None:
    """uid → restart sum of a stored identifier; {} for empty, None if malformed."""
    out: dict[str, int] = {}
    for part in (value or "").split(","):
        part = part.strip()
        if not part:
            continue
        uid, sep, restarts = part.rpartition(":")
        if not sep or not uid or not restarts.isdigit():
            return None
        out[uid] = int(restarts)
    return out


def deployment_converged(w: WorkloadObservation | None, live_ready_pods: int) -> bool:
    """spec.replicas == readyReplicas == updatedReplicas == the Ready pods this reconcile
    saw, and the current generation observed. The live count cross-checks the
    workload's reported status against the pod list, so a stale readyReplicas cannot
    fake convergence mid-rollout."""
    if w is None:
        return False
    return (
        w.spec_replicas == w.ready_replicas == w.updated_replicas == live_ready_pods
        and w.observed_generation >= w.generation
    )


def observed_server_instance_transition(
    prior: str | None, pods: Sequence[ServerPod], converged: bool
) -> InstanceTransition:
    """The next observedServerInstance baseline, and whether to cascade.

    ``pods`` are every live pod of the managed workload (Ready or not); the identifier
    covers the Ready ones.

    ===================================================  ==============  =======
    situation                                            new value       cascade
    ===================================================  ==============  =======
    no Ready pod (scaled to 0, stuck rollout, outage)    prior (stale)   no
    prior empty (or unreadable)                          current         no
    current == prior                                     prior           no
    a prior pod no longer exists                         current         yes
    a prior pod is Ready with a higher restart sum       current         yes
    strict superset, workload converged (scale-up)       current         no
    strict superset, not converged (rollout midpoint)    prior           no
    a prior pod exists but is not Ready (flap/restart)   prior           no
    ===================================================  ==============  =======

    A prior pod that is alive but not Ready keeps the baseline: a readiness flap is not
    a replacement, and a container restart shows as an advanced restart sum once the
    pod is Ready again (a crash-looping server therefore rolls the engines once, when
    it recovers, not on every crash). A prior pod that was deleted is a replacement
    even if its successor is not Ready yet — but with no Ready pod at all the prior
    value is kept, so the recovery (``gone → new``) is what cascades.
    """
    prior = prior or ""
    current = format_server_instance(pods)
    if not current:
        return InstanceTransition(prior, False, Why.UNAVAILABLE)
    before = parse_server_instance(prior)
    if not before:
        return InstanceTransition(current, False, Why.BASELINE)
    if current == prior:
        return InstanceTransition(prior, False, Why.UNCHANGED)
    live = {p.uid: p for p in pods}
    ready = {p.uid: p.restarts for p in pods if p.ready}
    gone = any(uid not in live for uid in before)
    advanced = any(uid in ready and ready[uid] > restarts for uid, restarts in before.items())
    if gone or advanced:
        return InstanceTransition(current, True, Why.REPLACEMENT)
    if set(before) < set(ready):
        if converged:
            return InstanceTransition(current, False, Why.SCALE_UP)
        return InstanceTransition(prior, False, Why.MIDPOINT)
    if set(before) == set(ready):
        # Same pods, no restart sum advanced (a stored identifier with a higher sum
        # than the live one cannot come from the same pod): re-baseline quietly.
        return InstanceTransition(current, False, Why.UNCHANGED)
    return InstanceTransition(prior, False, Why.NOT_READY)


def _controller_ref(obj: dict[str, Any], kind: str) -> str | None:
    for ref in meta(obj).owner_references:
        if ref.get("kind") == kind and ref.get("controller"):
            return str(ref.get("name"))
    return None


def cascade_targets(
    pods: Sequence[dict[str, Any]],
    replicasets: Sequence[dict[str, Any]],
    namespace: str,
    name: str,
    uid: str | None,
) -> list[str]:
    """Engine Deployments (sorted names) owning — through their ReplicaSet — a pod
    wired to this backend incarnation. Pods of bare ReplicaSets, StatefulSets or no
    controller are not rolled: the annotation mechanism is a Deployment's."""
    rs_owner = {meta(rs).name: _controller_ref(rs, "Deployment") for rs in replicasets}
    out: set[str] = set()
    for pod in pods:
        if not injected_by_backend(pod, namespace, name, uid):
            continue
        rs = _controller_ref(pod, "ReplicaSet")
        deployment = rs_owner.get(rs) if rs else None
        if deployment:
            out.add(deployment)
    return sorted(out)


def restart_trigger_patch(stamp: str) -> dict[str, Any]:
    """Merge patch that rolls a Deployment, like ``kubectl rollout restart``."""
    return {
        "spec": {
            "template": {
                "metadata": {"annotations": {c.ANNOTATION_CACHE_SERVER_RESTART_TRIGGER: stamp}}
            }
        }
    }
