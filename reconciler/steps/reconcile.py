"""The imperative shell of one reconcile: read, render, apply what differs, write status.

Level-based and idempotent: every run recomputes from what it reads; nothing depends
on which event woke it. An idle run (nothing drifted, status unchanged) writes
nothing — no apply, no delete, no status write, no Event — and, reading from the
worker's watch caches (``reconciler.steps.reads``, ``reconciler.watch.cluster_cache``), makes no
request at all.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import pydantic

from kubeio import client as k
from reconciler import metrics
from reconciler.status.compute import compute_status, status_equal
from reconciler.status.engine_pods import (
    observe_injected_pods,
    offloading_declined_pods,
)
from reconciler.status.events import EventSpec, event_object, transition_events
from reconciler.status.observed import (
    EngineObservation,
    Observed,
    ProbeObservation,
    WorkloadObservation,
)
from reconciler.status.ownership import NameConflict, name_conflicts, owned_by
from reconciler.status.published_types import ENGINE_ADVISORY_MODES
from reconciler.status.requeue import soonest_requeue
from reconciler.steps.diff import needs_apply
from reconciler.steps.engine_cascade import CascadeLimiter, EngineCascade
from reconciler.steps.exact_drift import spec_exactly_equal, spec_replacement
from reconciler.steps.reads import (
    ClusterReads,
    LiveReads,
    reads_owned_secrets,
    spec_changed,
    template_labels,
)
from reconciler.steps.server_client import Prober
from reconciler.steps.tenancy_reads import consumer_side, consumers_of
from reconciler.steps.workload_refusals import (
    failed_create_selector,
    latest_failed_create,
    needs_failed_create_read,
)
from shared import constants as c
from shared.api import effective
from shared.api.backend import Backend, read_backend
from shared.api.models import CacheBackend
from shared.backend_keys import BackendKey, injected_by_backend, object_key
from shared.backend_mode import Mode, backend_mode
from shared.conditions import is_true
from shared.labels import labels_match, valid_selector
from shared.objects import meta
from shared.pod_wiring import injected_by_uid_label
from shared.storage_providers.render import render_managed_objects, service_endpoint
from shared.tenancy import ConsumerStanding

log = logging.getLogger(__name__)

CONFLICT_RETRIES: Final = 5
PROBE_WINDOW_SECONDS: Final = 30.0
# The live-read counter's label for a pod whose annotations name the backend but which
# has no injected-by-uid label (admitted before the webhook stamped it): read by name.
UNLABELLED_INJECTED_POD_READ: Final = "unlabelled-injected-pod"
# The live-read counter's label for the FailedCreate Events of a StatefulSet short of pods.
FAILED_CREATE_EVENTS_READ: Final = "failed-create-events"


class ReconcileError(Exception):
    """A reconcile that must be retried with backoff."""


@dataclass
class ReconcileResult:
    requeue_after: float | None = None
    writes: int = 0
    mode: str = ""
    notes: list[str] = field(default_factory=list)


# A pass's clock before observing starts.
NOT_YET: Final = dt.datetime.min.replace(tzinfo=dt.UTC)
# A rendered or owned object within the backend's namespace: (kind, name).
ObjKey = tuple[str, str]


@dataclass
class Pass:
    """One reconcile pass over one backend: the object as read and parsed, where it
    reads from, and what converging and observing found, for the steps after."""

    backend: Backend
    mode: Mode
    reads: ClusterReads
    result: ReconcileResult
    # The live object of each rendered kind, once converged (or held).
    live_by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    conflicts: tuple[NameConflict, ...] = ()
    # Taken when observing starts: the status and the cascade stamp use it.
    now: dt.datetime = NOT_YET
    # Seconds until a cascade this pass could not finish should be looked at again.
    cascade_wait: float | None = None
    # A cross-namespace consumer's standing with the tier it points at.
    standing: ConsumerStanding = field(default_factory=lambda: ConsumerStanding(True))

    @property
    def key(self) -> BackendKey:
        return self.backend.key

    @property
    def uid(self) -> str | None:
        return self.backend.uid


# (key) -> seconds until the next probe is allowed (None: allowed now, and claimed).
ProbeRateLimiter = Callable[[str], float | None]


class Reconciler(EngineCascade):
    def __init__(
        self,
        kube: k.KubeClient,
        *,
        probe_rate_limiter: ProbeRateLimiter,
        cascade_limiter: CascadeLimiter,
        server: Prober | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        instance: str | None = None,
        probe_window: float = PROBE_WINDOW_SECONDS,
        reads: ClusterReads | None = None,
    ) -> None:
        self.kube = kube
        # Where observations come from (a worker's watch caches, or the API server);
        # a conflict retries on fresh API-server reads, and the engine cascade is
        # confirmed with them before any engine Deployment is rolled. Every write,
        # whichever reads led to it, is waited for in ``self.reads`` (a cache shows it
        # before the run the write triggers).
        self.reads: ClusterReads = reads or LiveReads(kube)
        self.fresh_reads = LiveReads(kube, fresh=True)
        self.server = server
        self.cascade_limiter = cascade_limiter
        self.probe_window = probe_window
        self.probe_rate_limiter = probe_rate_limiter
        self.clock = clock
        self.instance = instance or socket.gethostname()
        # Backends (uids) whose Secrets this process has read and converged since it
        # started (reconciler.steps.reads.reads_owned_secrets, first_read).
        self.secrets_read: set[str] = set()

    # ------------------------------------------------------------ entry point

    def reconcile(self, key: str, reads: ClusterReads | None = None) -> ReconcileResult:
        """One run for ``key``; ``reads``: where it reads (default: ``self.reads``)."""
        parsed = BackendKey.parse(key)
        if parsed is None:
            raise ReconcileError(f"{key}: not a namespace/name key")
        namespace, name = parsed
        reads = reads or self.reads
        for _ in range(CONFLICT_RETRIES):
            cb_obj = reads.backend(namespace, name)
            if cb_obj is None:
                # Deleted: owned objects go with it (owner references, API-server GC).
                return ReconcileResult(mode="deleted")
            if meta(cb_obj).deletion_timestamp:
                return ReconcileResult(mode="deleting")
            try:
                return self._reconcile(cb_obj, reads)
            except k.ApiError as exc:
                if exc.conflict:
                    log.info("conflict; re-reading", extra={"key": key, "reason": exc.reason})
                    # What we read was behind the API server: read it directly.
                    reads = self.fresh_reads
                    continue
                raise
        raise ReconcileError(f"{key}: still conflicting after {CONFLICT_RETRIES} attempts")

    # ------------------------------------------------------------ one pass

    def _reconcile(self, cb_obj: dict[str, Any], reads: ClusterReads) -> ReconcileResult:
        """Converge the owned objects on the render, observe what they and the engines
        show, publish the status that follows."""
        p = self._begin(cb_obj, reads)
        if p is None:
            return ReconcileResult(mode="invalid")
        self._converge(p)
        observed = self._observe(p)
        self._publish(p, observed)
        return p.result

    def _begin(self, cb_obj: dict[str, Any], reads: ClusterReads) -> Pass | None:
        try:
            backend = read_backend(cb_obj)
        except pydantic.ValidationError as exc:
            # A stored object we cannot read: nothing useful to do until it changes.
            log.error(
                "unreadable CacheBackend; waiting for it to change",
                extra={"key": str(object_key(cb_obj)), "error": str(exc)},
            )
            return None
        mode = backend_mode(backend.model)
        return Pass(
            backend=backend,
            mode=mode,
            reads=reads,
            result=ReconcileResult(mode=str(mode)),
        )

    # ------------------------------------------------------------ converge

    def _converge(self, p: Pass) -> None:
        """Apply what the render wants, shed what it no longer renders; or, while a
        rendered name is taken by an object not ours, write nothing. Sets the live
        object of each rendered kind and the name conflicts."""
        owned = self._list_owned(p)
        consumers = consumers_of(p.backend.model, p.reads)
        consumer = consumer_side(p.backend.model, self.kube, p.reads)
        p.standing = consumer.standing
        # The live objects let an autoscaled workload keep the HPA's replica count.
        desired = [
            *render_managed_objects(p.backend.model, owned, consumers=consumers),
            *consumer.copies,
        ]
        wanted = {(o["kind"], meta(o).name) for o in desired}
        existing = self._read_unlisted(p, desired, owned)
        unlisted_ours = {
            key: obj for key, obj in existing.items() if obj is not None and owned_by(obj, p.uid)
        }
        if unlisted_ours:
            # Ours, but not (yet) in what was listed: render again from it, so what it
            # holds and the render depends on (a password) is kept, not replaced.
            desired = [
                *render_managed_objects(
                    p.backend.model, {**owned, **unlisted_ours}, consumers=consumers
                ),
                *consumer.copies,
            ]
        p.conflicts = tuple(name_conflicts(desired, existing, p.uid))
        if p.conflicts:
            self._hold(p, owned, wanted)
        else:
            self._shed(p, owned, wanted)
            self._apply(p, desired, owned, existing)
            if p.uid:
                self.secrets_read.add(p.uid)

    def _hold(self, p: Pass, owned: dict[ObjKey, dict[str, Any]], wanted: set[ObjKey]) -> None:
        """Hold the backend as a unit: no shed, no apply, until every rendered name is
        free or ours (a half-provisioned backend, or a shed workload whose replacement
        cannot be created, is worse than the last good state)."""
        log.warning(
            "name conflict: writing nothing",
            extra={
                "key": str(p.key),
                "conflicts": ", ".join(f"{x.kind} {x.name}" for x in p.conflicts),
            },
        )
        for (kind, obj_name), live in owned.items():
            if (kind, obj_name) in wanted:
                p.live_by_kind[kind] = live

    def _shed(self, p: Pass, owned: dict[ObjKey, dict[str, Any]], wanted: set[ObjKey]) -> None:
        """Delete what is no longer rendered (mode switch, provider or kind change). Only
        objects we control are candidates (see _list_owned), and the delete is
        preconditioned on the uid we looked at."""
        namespace = p.key.namespace
        for (kind, obj_name), live in owned.items():
            if (kind, obj_name) in wanted:
                continue
            log.info(
                "shedding an object the spec no longer renders",
                extra={"key": str(p.key), "kind": kind, "object": obj_name},
            )
            self.kube.delete(k.BY_KIND[kind], namespace, obj_name, uid=meta(live).uid or None)
            self.reads.after_write(
                k.BY_KIND[kind], namespace, obj_name, meta(live).resource_version, None
            )
            self._count_write("delete", kind)
            p.result.writes += 1

    def _apply(
        self,
        p: Pass,
        desired: list[dict[str, Any]],
        owned: dict[ObjKey, dict[str, Any]],
        existing: dict[ObjKey, dict[str, Any] | None],
    ) -> None:
        """Create or update each rendered object that differs from the live one."""
        namespace = p.key.namespace
        for obj in desired:
            kind, obj_name = obj["kind"], meta(obj).name
            current = owned.get((kind, obj_name)) or existing.get((kind, obj_name))
            if current is None or needs_apply(obj, current) or not spec_exactly_equal(obj, current):
                # An existing object is updated only as the very object we saw (uid
                # precondition), so a foreign object recreated under the name
                # meanwhile is refused, not adopted.
                live_uid = meta(current).uid or None
                before = meta(current).resource_version
                current = self.kube.apply(k.BY_KIND[kind], namespace, obj, uid=live_uid)
                self.reads.after_write(
                    k.BY_KIND[kind], namespace, obj_name, before, meta(current).resource_version
                )
                self._count_write("apply", kind)
                p.result.writes += 1
                current = self._replace_foreign_spec(p, obj, current)
            p.live_by_kind[kind] = current

    def _replace_foreign_spec(
        self, p: Pass, obj: dict[str, Any], current: dict[str, Any]
    ) -> dict[str, Any]:
        """Keys another field manager added inside a spec we must hold exactly
        (reconciler.steps.exact_drift) survive server-side apply: replace the spec."""
        if spec_exactly_equal(obj, current):
            return current
        kind, obj_name = obj["kind"], meta(obj).name
        before = meta(current).resource_version
        ops = spec_replacement(obj, meta(current).uid)
        try:
            replaced = self.kube.patch(
                k.BY_KIND[kind], p.key.namespace, obj_name, ops, content_type=k.JSON_PATCH
            )
        except k.ApiError as exc:
            # A failed uid test: another object under the name now; re-read, decide again.
            if exc.status == 422:
                raise k.ApiError(409, "Conflict", exc.body) from exc
            raise
        self.reads.after_write(
            k.BY_KIND[kind], p.key.namespace, obj_name, before, meta(replaced).resource_version
        )
        self._count_write("apply", kind)
        p.result.writes += 1
        return replaced

    def _list_owned(self, p: Pass) -> dict[ObjKey, dict[str, Any]]:
        """Objects carrying our labels *and* a controller reference to this backend;
        its Secrets (read by name) only when it may hold one (reads_owned_secrets)."""
        listed = p.reads.owned(p.key.namespace, p.key.name)
        rs = p.backend.model.spec.remote_storage
        if reads_owned_secrets(
            rs.provider if rs is not None else None,
            listed,
            spec_changed=spec_changed(p.backend.raw),
            first_read=p.uid not in self.secrets_read,
        ):
            listed = [*p.reads.owned_secrets(p.key.namespace, p.key.name), *listed]
        return {
            (str(item["kind"]), meta(item).name): item for item in listed if owned_by(item, p.uid)
        }

    def _read_unlisted(
        self, p: Pass, desired: list[dict[str, Any]], owned: dict[ObjKey, dict[str, Any]]
    ) -> dict[ObjKey, dict[str, Any] | None]:
        """The live object of each rendered name the owned list did not cover (None:
        absent). Steady state reads nothing here: every rendered object is owned."""
        out: dict[ObjKey, dict[str, Any] | None] = {}
        for obj in desired:
            key = (obj["kind"], meta(obj).name)
            if key not in owned:
                out[key] = self.kube.get_or_none(k.BY_KIND[key[0]], p.key.namespace, key[1])
        return out

    # ------------------------------------------------------------ observe

    def _observe(self, p: Pass) -> Observed:
        """What the converged objects, the engines and the cache server show now (the
        cascade, when the server was replaced, runs here: it decides
        observedServerInstance)."""
        workload_obj = p.live_by_kind.get(c.DEPLOYMENT_KIND_DEPLOYMENT) or p.live_by_kind.get(
            c.DEPLOYMENT_KIND_STATEFULSET
        )
        service = p.live_by_kind.get("Service")
        workload = WorkloadObservation.from_object(workload_obj) if workload_obj else None
        if workload is not None and workload_obj is not None:
            workload = self._statefulset_refusal(p, workload_obj, workload)
        p.now = self.clock()
        engine_pods, engines = observe_engines(p.reads, p.backend.model)
        injected: list[dict[str, Any]] | None = None
        if p.mode in ENGINE_ADVISORY_MODES:
            injected = self._injected_pods(p, engine_pods)
        server_instance: str | None = None
        if p.mode == Mode.MANAGED and workload_obj is not None:
            server_instance = self._server_instance(p, workload_obj, workload, injected)
        return Observed(
            workload=workload,
            service_endpoint=service_endpoint(service) if service else "",
            engines=engines,
            injected_pods=(
                observe_injected_pods(injected, p.key.namespace, p.key.name, p.uid)
                if injected is not None
                else None
            ),
            offloading_declined=(
                offloading_declined_pods(engine_pods, p.key.namespace, p.key.name)
                if engine_pods is not None and p.mode in ENGINE_ADVISORY_MODES
                else None
            ),
            server_instance=server_instance,
            name_conflicts=p.conflicts,
            cross_namespace=p.standing,
        )

    def _statefulset_refusal(
        self, p: Pass, obj: dict[str, Any], w: WorkloadObservation
    ) -> WorkloadObservation:
        """A StatefulSet short of pods, with the API server's latest refusal of one
        (reconciler.steps.workload_refusals); any other workload as observed."""
        uid = meta(obj).uid
        if not uid or not needs_failed_create_read(w.kind, w.spec_replicas, w.replicas):
            return w
        metrics.CACHE_LIVE_READS.labels(FAILED_CREATE_EVENTS_READ).inc()
        try:
            events = self.kube.list(
                k.EVENTS, p.key.namespace, field_selector=failed_create_selector(uid)
            )
        except k.ApiError as exc:
            log.warning(
                "could not list the workload's FailedCreate Events",
                extra={"key": str(p.key), "error": str(exc)},
            )
            return w
        refusal = latest_failed_create(events.get("items") or [])
        return dataclasses.replace(w, pod_creation_failure=refusal) if refusal else w

    def _injected_pods(
        self, p: Pass, engine_pods: list[dict[str, Any]] | None
    ) -> list[dict[str, Any]] | None:
        """Whole pods that may be this backend's injected engines: those carrying its
        injected-by-uid label, plus any selector-matched pod whose annotations name it
        but which has no label (admitted before the webhook stamped one), read one by
        one. The annotation rule (``injected_by_backend``) decides afterwards, so a
        stale or forged label counts for nothing. None: a read failed (the advisory
        conditions keep their previous verdict)."""
        if not p.uid:
            return []
        if engine_pods is None:
            return None
        namespace, name = p.key
        try:
            pods = p.reads.injected_pods(namespace, p.uid) if injected_by_uid_label(p.uid) else []
            seen = {meta(pod).name for pod in pods}
            for engine_pod in engine_pods:
                pod_name = meta(engine_pod).name
                if pod_name in seen or not injected_by_backend(engine_pod, namespace, name, p.uid):
                    continue
                # One GET per reconcile for each such pod until its workload rolls
                # (new pods carry the label): counted, so the cost is visible.
                metrics.CACHE_LIVE_READS.labels(UNLABELLED_INJECTED_POD_READ).inc()
                pod = self.kube.get_or_none(k.PODS, namespace, pod_name)
                if pod is not None:
                    pods.append(pod)
        except k.ApiError as exc:
            log.warning(
                "could not list injected pods", extra={"namespace": namespace, "error": str(exc)}
            )
            return None
        return pods

    # ------------------------------------------------------------ publish

    def _publish(self, p: Pass, observed: Observed) -> None:
        """The status this pass decides (probing first when the gates upstream of the
        probe say Ready), written only if it changed, with an Event per transition."""
        outcome = compute_status(p.backend.model, p.backend.status, observed, p.now)
        if self.server is not None and outcome.mode == Mode.MANAGED:
            probe = self._probe(p, outcome.status)
            if probe is not None:
                observed = dataclasses.replace(observed, probe=probe)
                outcome = compute_status(p.backend.model, p.backend.status, observed, p.now)
        p.result.requeue_after = soonest_requeue(outcome.requeue_after, p.cascade_wait)
        old_status = p.backend.status
        if status_equal(old_status, outcome.status):
            return
        body = dict(p.backend.raw)
        body["status"] = outcome.status
        namespace, name = p.key
        updated = self.kube.replace_status(k.CACHEBACKENDS, namespace, name, body)
        self.reads.after_write(
            k.CACHEBACKENDS,
            namespace,
            name,
            meta(p.backend.raw).resource_version,
            meta(updated).resource_version,
        )
        self._count_write("update", "CacheBackend/status")
        p.result.writes += 1
        for event in transition_events(old_status, outcome.status):
            self._record_event(p, updated, event)

    def _record_event(self, p: Pass, updated: dict[str, Any], event: EventSpec) -> None:
        try:
            self.kube.create(
                k.EVENTS, p.key.namespace, event_object(updated, event, p.now, self.instance)
            )
            self._count_write("create", "Event")
            p.result.writes += 1
        except k.ApiError as exc:  # Events are best effort
            log.warning(
                "could not record an Event",
                extra={"key": str(p.key), "event_reason": event.reason, "error": str(exc)},
            )

    def _probe(self, p: Pass, pre_status: dict[str, Any]) -> ProbeObservation | None:
        """The functional-probe gate's input: bypassed, rate-limited, or a real call.

        Only probes when the upstream gates would say Ready (probing a not-yet-ready
        backend is noise and cannot diagnose anything).
        """
        assert self.server is not None
        cb = p.backend.model
        annotations = cb.metadata.annotations or {}
        if (annotations.get(c.ANNOTATION_SKIP_FUNCTIONAL_PROBE) or "").strip().lower() == "true":
            return ProbeObservation("bypassed")
        if not is_true(pre_status.get("conditions"), c.COND_READY):
            return ProbeObservation("rate_limited")
        key = str(p.key)
        wait = self.probe_rate_limiter(key)
        if wait is not None:
            return ProbeObservation("rate_limited", retry_after_seconds=wait)
        observation = self.server.probe(
            backend=key,
            model=effective.model_id(cb.spec) or "",
            hash_scheme="sglang" if cb.spec.runtime == c.RUNTIME_SGLANG else "vllm",
            backend_type=c.TYPE_LMCACHE
            if effective.cache_type(cb.spec) == c.TYPE_LMCACHE
            else None,
        )
        return ProbeObservation(
            observation.outcome,
            failed_stage=observation.failed_stage,
            message=observation.message,
            retry_after_seconds=self.probe_window,
        )

    @staticmethod
    def _count_write(verb: str, resource: str) -> None:
        metrics.API_WRITES.labels(verb, resource).inc()


def observe_engines(
    reads: ClusterReads, cb: CacheBackend
) -> tuple[list[dict[str, Any]] | None, EngineObservation | None]:
    """The pods spec.engineSelector matches (their metadata) and what
    matchedEnginePods, engineSelectorMessage and the churn cadence decide on.
    ([], None) without a claim-capable selector; None for what could not be read
    this time (the previous values stand)."""
    labels = effective.claim_match_labels(cb.spec)
    if not labels:
        return [], None
    if not valid_selector(labels):
        # No object can carry a label that is not valid syntax: nothing matches,
        # and the API server would refuse the selector.
        return [], EngineObservation(matched_pods=0)
    namespace = str(cb.metadata.namespace)
    try:
        pods = reads.engine_pods(namespace, labels)
    except k.ApiError as exc:
        # A transient failure keeps the previous observation.
        log.warning("could not list engine pods", extra={"namespace": namespace, "error": str(exc)})
        return None, None
    try:
        deployments = reads.engine_deployments(namespace, labels)
    except k.ApiError as exc:
        log.warning(
            "could not read engine Deployments",
            extra={"namespace": namespace, "error": str(exc)},
        )
        return pods, None
    replicas = sum(
        1 if (d.get("spec") or {}).get("replicas") is None else int(d["spec"]["replicas"])
        for d in deployments
        if labels_match(labels, template_labels(d))
    )
    return pods, EngineObservation(
        matched_pods=len(pods),
        matching_deployments=len(deployments),
        matching_deployment_replicas=replicas,
    )
