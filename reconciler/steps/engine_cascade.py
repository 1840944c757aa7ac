"""The engine cascade of one reconcile: when the cache server behind a backend is
replaced, roll the engine Deployments whose pods it wired, at most once per backend per
window, and only after fresh API-server reads confirm the replacement.

``EngineCascade`` holds these steps for ``reconciler.steps.reconcile.Reconciler``, which
inherits them; the decisions themselves are pure (``reconciler.status.cascade``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from kubeio import client as k
from reconciler.status.cascade import (
    InstanceTransition,
    cascade_targets,
    deployment_converged,
    observed_server_instance_transition,
    restart_trigger_patch,
)
from reconciler.status.engine_pods import server_pods, workload_selector
from reconciler.status.observed import WorkloadObservation
from reconciler.steps.reads import ClusterReads, controller_name
from shared.backend_keys import injected_by_backend
from shared.conditions import format_time
from shared.objects import meta

if TYPE_CHECKING:
    from reconciler.steps.reconcile import Pass

log = logging.getLogger("reconciler.steps.reconcile")

# A cache-server replacement the fresh read did not confirm (the cache was ahead of,
# or behind, the API server): look again this soon.
CASCADE_RECHECK_SECONDS: Final = 2.0

# "go": claimed, cascade now; "done": the cascade for exactly this identifier already
# ran (a retried reconcile after the status write lost a race); "wait": another
# cascade ran for this backend within the window — seconds until it may.
CascadeClaim = tuple[Literal["go", "done", "wait"], float]


class CascadeLimiter(Protocol):
    """At most one engine cascade per backend per window (shared across workers)."""

    def claim(self, key: str, value: str) -> CascadeClaim:
        """Claim ``key`` for this cascade, recording ``value``; go, done or wait."""

    def release(self, key: str) -> None:
        """Give ``key`` back so the next cascade may run at once."""


class EngineCascade:
    """The cascade steps of a reconciler: what they use of it is declared here."""

    kube: k.KubeClient
    fresh_reads: ClusterReads
    cascade_limiter: CascadeLimiter
    _count_write: Callable[[str, str], None]

    def _server_instance(
        self,
        p: Pass,
        workload_obj: dict[str, Any],
        workload: WorkloadObservation | None,
        injected: list[dict[str, Any]] | None,
    ) -> str | None:
        """observedServerInstance for this pass (None keeps the prior one), cascading
        first when the transition is a replacement; sets how soon the cascade should
        be looked at again."""
        prior = str(p.backend.status.get("observedServerInstance") or "")
        transition = self._instance_transition(
            p.reads, p.key.namespace, prior, workload_obj, workload
        )
        if transition is None or not transition.cascade:
            return transition.value if transition else None
        if injected is None:
            p.cascade_wait = CASCADE_RECHECK_SECONDS  # whom to roll is unknown this time
            return None
        # Rolling engines is the one write a stale view could make wrongly: decide it
        # again on the API server's current state (the backend's baseline and the
        # server pods) and go ahead only if that decision is the same.
        confirmed = self._confirm_replacement(p, workload_obj, workload)
        if confirmed != transition.value:
            log.info(
                "cache-server replacement not confirmed by a fresh read; looking again",
                extra={"key": str(p.key), "cached": transition.value, "fresh": confirmed or ""},
            )
            p.cascade_wait = CASCADE_RECHECK_SECONDS
            return None
        targets = self._cascade_targets(p, injected)
        if not targets:
            log.info(
                "cache server replaced; no engine Deployment to roll",
                extra={"key": str(p.key), "prior_instance": prior},
            )
            return transition.value
        verdict, wait = self.cascade_limiter.claim(str(p.key), transition.value)
        if verdict == "done":
            return transition.value
        if verdict == "wait":
            log.info(
                "cache server replaced; engine cascade rate-limited",
                extra={"key": str(p.key), "delay_s": round(wait, 1)},
            )
            p.cascade_wait = wait
            return None
        self._roll_engines(p, targets)
        log.info(
            "cache server replaced: rolled engine Deployments",
            extra={
                "key": str(p.key),
                "prior_instance": prior,
                "instance": transition.value,
                "deployments": list(targets),
            },
        )
        return transition.value

    def _roll_engines(self, p: Pass, targets: list[str]) -> None:
        """Restart each target Deployment; the claim is given back if a patch fails."""
        stamp = format_time(p.now)
        try:
            for deployment in targets:
                try:
                    self.kube.patch(
                        k.DEPLOYMENTS,
                        p.key.namespace,
                        deployment,
                        restart_trigger_patch(stamp),
                        content_type=k.MERGE_PATCH,
                    )
                except k.ApiError as exc:
                    if not exc.not_found:  # deleted meanwhile: nothing to roll
                        raise
                self._count_write("patch", "Deployment")
                p.result.writes += 1
        except Exception:
            self.cascade_limiter.release(str(p.key))
            raise

    @staticmethod
    def _instance_transition(
        reads: ClusterReads,
        namespace: str,
        prior: str,
        workload_obj: dict[str, Any],
        workload: WorkloadObservation | None,
    ) -> InstanceTransition | None:
        """The observedServerInstance transition the server pods ``reads`` sees imply
        (None: the pods could not be read; the prior value stands)."""
        try:
            pods = reads.workload_pods(namespace, workload_selector(workload_obj))
        except k.ApiError as exc:
            log.warning(
                "could not list cache-server pods",
                extra={"namespace": namespace, "error": str(exc)},
            )
            return None
        observation = server_pods(pods, workload_obj)
        live_ready = sum(1 for pod in observation.pods if pod.ready)
        return observed_server_instance_transition(
            prior, observation.pods, deployment_converged(workload, live_ready)
        )

    def _confirm_replacement(
        self, p: Pass, workload_obj: dict[str, Any], workload: WorkloadObservation | None
    ) -> str | None:
        """The new identifier if fresh reads also call this a replacement, else None."""
        live = self.fresh_reads.backend(p.key.namespace, p.key.name)
        if live is None or (meta(live).uid or None) != p.uid:
            return None
        prior = str((live.get("status") or {}).get("observedServerInstance") or "")
        fresh = self._instance_transition(
            self.fresh_reads, p.key.namespace, prior, workload_obj, workload
        )
        return fresh.value if fresh is not None and fresh.cascade else None

    def _cascade_targets(self, p: Pass, injected: list[dict[str, Any]]) -> list[str]:
        """The engine Deployments to roll: the owners of the ReplicaSets that own this
        backend's injected pods, each ReplicaSet read by name."""
        namespace, name = p.key
        names = sorted(
            {
                owner
                for pod in injected
                if injected_by_backend(pod, namespace, name, p.uid)
                and (owner := controller_name(pod, "ReplicaSet")) is not None
            }
        )
        replicasets = [
            replicaset
            for rs_name in names
            if (replicaset := self.kube.get_or_none(k.REPLICASETS, namespace, rs_name)) is not None
        ]
        return cascade_targets(injected, replicasets, namespace, name, p.uid)
