"""Leader election on a coordination.k8s.io/v1 Lease, client-go style.

Expiry is judged by *local observation time* (when this candidate last saw the
lease record change), not by comparing the holder's renewTime with our clock, so
clock skew between candidates cannot cause a premature takeover.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubeio import client as k
from shared.backend_keys import BackendKey

log = logging.getLogger(__name__)


def lease_client(kube: k.KubeClient, renew_deadline: float) -> k.KubeClient:
    """A client for the Lease calls alone: no urllib3 transport retries, and the renew
    deadline as each call's whole budget (a Retry-After wait and the resend included),
    as client-go bounds each renew.
    A leader whose API server stopped answering must notice it no longer holds the
    lease before a standby can take over, not after the shared client's 30 s timeout
    times its retries."""
    if not isinstance(kube, k.Kube):  # a test double
        return kube
    configuration = copy.deepcopy(kube.api_client.configuration)
    configuration.retries = False
    return k.Kube.from_configuration(
        configuration, timeout=min(kube.timeout, max(renew_deadline, 1.0))
    )


def micro_time(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ElectionSettings:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    def __init__(
        self,
        kube: k.KubeClient,
        settings: ElectionSettings,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.kube = lease_client(kube, settings.renew_deadline)
        self.s = settings
        self._mono = monotonic
        self._wall = wall
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self.last_renew = float("-inf")

    @property
    def holds_lease(self) -> bool:
        """Renewed within the renew deadline."""
        return self._mono() - self.last_renew < self.s.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        try:
            acquired = self._try()
        except k.ApiError as exc:
            if not exc.conflict:
                log.warning("lease update failed", extra=self._log_fields(exc))
            return False
        except Exception as exc:  # connection errors: keep campaigning
            log.warning("lease update failed", extra=self._log_fields(exc))
            return False
        if acquired:
            self.last_renew = self._mono()
        return acquired

    def _log_fields(self, exc: BaseException) -> dict[str, Any]:
        return {"lease": str(BackendKey(self.s.namespace, self.s.name)), "error": str(exc)}

    def _spec(self, prev: dict[str, Any] | None) -> dict[str, Any]:
        now = micro_time(self._wall())
        prev = prev or {}
        same_holder = prev.get("holderIdentity") == self.s.identity
        return {
            "holderIdentity": self.s.identity,
            "leaseDurationSeconds": max(round(self.s.lease_duration), 1),
            "acquireTime": prev.get("acquireTime")
            if same_holder and prev.get("acquireTime")
            else now,
            "renewTime": now,
            "leaseTransitions": int(prev.get("leaseTransitions") or 0) + (0 if same_holder else 1),
        }

    def _try(self) -> bool:
        lease = self.kube.get_or_none(k.LEASES, self.s.namespace, self.s.name)
        if lease is None:
            spec = self._spec(None)
            spec["leaseTransitions"] = 0
            self.kube.create(
                k.LEASES,
                self.s.namespace,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.s.name, "namespace": self.s.namespace},
                    "spec": spec,
                },
            )
            self._observe(spec)
            return True
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.s.lease_duration)
        if holder and holder != self.s.identity and self._mono() - self._observed_at < duration:
            return False  # someone else holds an unexpired lease
        lease["spec"] = self._spec(spec)
        self.kube.replace(k.LEASES, self.s.namespace, self.s.name, lease)
        self._observe(lease["spec"])
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed = record
            self._observed_at = self._mono()

    def release(self) -> None:
        """Give the lease up so a standby takes over at once (ReleaseOnCancel)."""
        try:
            lease = self.kube.get_or_none(k.LEASES, self.s.namespace, self.s.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.s.identity:
                return
            spec = dict(lease["spec"])
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = micro_time(self._wall())
            lease["spec"] = spec
            self.kube.replace(k.LEASES, self.s.namespace, self.s.name, lease)
        except Exception as exc:
            log.warning("could not release the lease", extra=self._log_fields(exc))
        self.last_renew = float("-inf")
