"""The engine-pod events controller: InjectedByCacheBackend / SkippedByOperator on pods.

The Pod webhook cannot record these itself: at mutating admission the pod has no
metadata.uid yet, and ``kubectl describe pod`` filters Events by involvedObject.uid.
The leading dispatcher therefore watches pods and, after CREATE, reads the decision
annotations the webhook persisted:

- ``injected_by_claim`` / ``injected_by_cache_backend_event``: a pod stamped with
  ``injected-by: <ns>/<name>`` AND ``injected-by-uid`` gets a Normal
  InjectedByCacheBackend Event only when the UID equals the live CacheBackend's
  metadata.uid. Skipped when the CR is NotFound, the UID annotation is absent, or it
  does not match (a copied template, or the CR recreated under the same name). A claim
  naming another namespace is skipped too: the webhook only ever selects backends in
  the pod's own namespace.
- ``skipped_by_operator_event``: a Normal SkippedByOperator Event when the pod carries
  both a truthy ``skip-inject`` and ``inject-skipped: skip-inject-annotation``.

Each Event is recorded once: its name is a function of the pod's UID and the reason,
so a second attempt (another leader, a restart) is a 409 on the same object rather
than a new Event. :class:`EnginePodEvents` is the small shell around the pure rules.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kubeio import client as k
from reconciler.status.events import NORMAL, core_event
from shared import constants as c
from shared.backend_keys import BackendKey
from shared.objects import meta, metadata
from shared.pod_wiring import skip_inject_requested

# An Event name is a DNS subdomain (<= 253 characters).
_MAX_POD_PREFIX: Final = 200
# A confirmed (backend, uid) pair is reused this long, so the pods of one backend (a
# leader's initial list, a rollout) cost one GET. Only matches are reused: a UID is fixed
# at creation, so a match cannot turn stale in a way that forges one, while a miss is
# always re-checked live (the CR may just have been recreated).
UID_MATCH_TTL_SECONDS: Final = 10.0


@dataclass(frozen=True)
class PodEventSpec:
    reason: str
    message: str
    type: str = NORMAL


def relevant(pod: dict[str, Any]) -> bool:
    """Only pods carrying one of the webhook's decision markers matter."""
    annotations = meta(pod).annotations
    return c.ANNOTATION_INJECTED_BY in annotations or c.ANNOTATION_INJECT_SKIPPED in annotations


@dataclass(frozen=True)
class InjectedByClaim:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return str(BackendKey(self.namespace, self.name))


def injected_by_claim(pod: dict[str, Any]) -> InjectedByClaim | None:
    """The backend the pod claims to be injected by, when the claim is checkable: both
    annotations present, and the backend in the pod's own namespace."""
    annotations = meta(pod).annotations
    injected = (annotations.get(c.ANNOTATION_INJECTED_BY) or "").strip()
    uid = (annotations.get(c.ANNOTATION_INJECTED_BY_UID) or "").strip()
    key = BackendKey.parse(injected)
    if key is None or not uid or key.namespace != metadata(pod).get("namespace"):
        return None
    return InjectedByClaim(key.namespace, key.name, uid)


def injected_by_cache_backend_event(
    claim: InjectedByClaim | None, live_uid: str | None
) -> PodEventSpec | None:
    """``live_uid``: the named CR's metadata.uid, None when it is NotFound."""
    if claim is None or live_uid is None or claim.uid != live_uid:
        return None
    return PodEventSpec(
        c.EVENT_INJECTED_BY_CACHE_BACKEND,
        f"Engine wired by CacheBackend {claim.key} (uid {claim.uid}).",
    )


def skipped_by_operator_event(pod: dict[str, Any]) -> PodEventSpec | None:
    annotations = meta(pod).annotations
    if (
        skip_inject_requested(pod)
        and annotations.get(c.ANNOTATION_INJECT_SKIPPED) == c.INJECT_SKIPPED_VALUE
    ):
        return PodEventSpec(
            c.EVENT_SKIPPED_BY_OPERATOR,
            f"Cache wiring skipped: the pod opts out with {c.ANNOTATION_SKIP_INJECT}.",
        )
    return None


def pod_event_name(pod: dict[str, Any], reason: str) -> str:
    """Deterministic per (pod UID, reason): a repeat is the same object, not a new one."""
    raw_meta = metadata(pod)
    digest = hashlib.sha256(f"{raw_meta.get('uid')}/{reason}".encode()).hexdigest()[:16]
    prefix = str(raw_meta.get("name") or "pod")[:_MAX_POD_PREFIX].rstrip(".-")
    return f"{prefix}.{digest}"


def pod_event_object(
    pod: dict[str, Any], event: PodEventSpec, now: dt.datetime, instance: str
) -> dict[str, Any]:
    return core_event(
        pod,
        ("v1", "Pod"),
        {"name": pod_event_name(pod, event.reason), "namespace": metadata(pod).get("namespace")},
        event.type,
        event.reason,
        event.message,
        now,
        instance,
    )


log = logging.getLogger(__name__)


class EnginePodEvents:
    """Records the two pod Events, once per pod and reason.

    Decisions are remembered per pod UID (recorded, or final skips: NotFound and UID
    mismatch cannot heal, since a CR's UID is fixed at creation); a transient API error
    leaves the pod pending for :meth:`retry` (the dispatcher calls it each resync).
    """

    def __init__(
        self,
        kube: k.KubeClient,
        instance: str,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.clock = clock
        self._lock = threading.Lock()
        self._done: set[tuple[str, str]] = set()  # (pod uid, reason)
        self._pending: dict[str, dict[str, Any]] = {}  # pod uid -> pod
        self._matches: dict[tuple[str, str], float] = {}  # (backend key, uid) -> expiry

    def observe(self, event_type: str, pod: dict[str, Any]) -> None:
        uid = str(metadata(pod).get("uid") or "")
        if not uid:
            return
        if event_type == "DELETED":
            self.forget(uid)
            return
        if not relevant(pod) or metadata(pod).get("deletionTimestamp"):
            return
        try:
            self._observe(uid, pod)
        except Exception as exc:  # API error, connection reset: try again later
            log.warning(
                "engine-pod events: recording failed; will retry",
                extra={
                    "namespace": metadata(pod).get("namespace"),
                    "pod": metadata(pod).get("name"),
                    "error": str(exc),
                },
            )
            with self._lock:
                self._pending[uid] = pod
        else:
            with self._lock:
                self._pending.pop(uid, None)

    def retry(self) -> None:
        with self._lock:
            pending = list(self._pending.values())
        for pod in pending:
            self.observe("MODIFIED", pod)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._pending.pop(uid, None)
            self._done = {d for d in self._done if d[0] != uid}

    def reset(self) -> None:
        with self._lock:
            self._pending.clear()
            self._done.clear()
            self._matches.clear()

    def _live_uid(self, claim: InjectedByClaim) -> tuple[bool, str | None]:
        """(found, uid) of the named CacheBackend; a recent confirmed match is reused."""
        now = time.monotonic()
        with self._lock:
            expiry = self._matches.get((claim.key, claim.uid))
            if expiry is not None and expiry > now:
                return True, claim.uid
        live = self.kube.get_or_none(k.CACHEBACKENDS, claim.namespace, claim.name)
        if live is None:
            return False, None
        uid = str(metadata(live).get("uid") or "") or None
        if uid is not None:
            with self._lock:
                self._matches = {m: e for m, e in self._matches.items() if e > now}
                self._matches[(claim.key, uid)] = now + UID_MATCH_TTL_SECONDS
        return True, uid

    def _is_done(self, uid: str, reason: str) -> bool:
        with self._lock:
            return (uid, reason) in self._done

    def _mark_done(self, uid: str, reason: str) -> None:
        with self._lock:
            self._done.add((uid, reason))

    def _observe(self, uid: str, pod: dict[str, Any]) -> None:
        skipped = skipped_by_operator_event(pod)
        if skipped is not None and not self._is_done(uid, skipped.reason):
            self._record(uid, pod, skipped)
        reason = c.EVENT_INJECTED_BY_CACHE_BACKEND
        claim = injected_by_claim(pod)
        if claim is None or self._is_done(uid, reason):
            return
        found, live_uid = self._live_uid(claim)
        event = injected_by_cache_backend_event(claim, live_uid)
        if event is None:
            log.info(
                "engine-pod events: the pod's injected-by claim does not match the live "
                "CacheBackend; no Event",
                extra={
                    "namespace": claim.namespace,
                    "pod": metadata(pod).get("name"),
                    "backend": claim.key,
                    "claimed_uid": claim.uid,
                    "live_uid": live_uid if found else None,
                    "event_reason": reason,
                },
            )
            self._mark_done(uid, reason)
            return
        self._record(uid, pod, event)

    def _record(self, uid: str, pod: dict[str, Any], event: PodEventSpec) -> None:
        body = pod_event_object(pod, event, self.clock(), self.instance)
        try:
            self.kube.create(k.EVENTS, str(metadata(pod).get("namespace")), body)
        except k.ApiError as exc:
            if not exc.conflict:  # 409: recorded before (another leader, a restart)
                raise
        self._mark_done(uid, event.reason)
