"""Why a managed StatefulSet cannot create its pods.

A Deployment says so itself (its ReplicaFailure condition, read by
``WorkloadObservation.from_object``). A StatefulSet has no such condition: its
controller records each refused pod create as a ``FailedCreate`` Warning Event on the
StatefulSet, with the API server's message. The worker reads those Events only for a
StatefulSet that is short of pods (status.replicas below spec.replicas), by a field
selector on the StatefulSet's uid and the reason: a healthy backend costs no read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from shared import constants as c
from shared.objects import metadata

#: The StatefulSet (and ReplicaSet) controller's Event reason for a refused pod create.
FAILED_CREATE_REASON: Final = "FailedCreate"


def needs_failed_create_read(kind: str, spec_replicas: int, replicas: int) -> bool:
    """A StatefulSet with fewer pods than it wants: the only case worth a read."""
    return kind == c.DEPLOYMENT_KIND_STATEFULSET and replicas < spec_replicas


def failed_create_selector(uid: str) -> str:
    """The Events about this very object (a re-created namesake is another uid)."""
    return f"involvedObject.uid={uid},reason={FAILED_CREATE_REASON}"


def _when(event: Mapping[str, Any]) -> str:
    # RFC 3339 stamps of one writer compare as strings; eventTime (events.k8s.io
    # writers) carries microseconds, lastTimestamp (core writers) seconds.
    meta = metadata(event)
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or meta.get("creationTimestamp")
        or ""
    )


def latest_failed_create(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The message of the newest FailedCreate Event (None: there is none)."""
    refusals = [e for e in events if e.get("reason") == FAILED_CREATE_REASON]
    if not refusals:
        return None
    newest = max(refusals, key=_when)
    return str(newest.get("message") or FAILED_CREATE_REASON)
