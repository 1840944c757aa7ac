"""The KV-event readiness gate: Ready only once an engine's KV event reached the index,
Degraded when none arrives within firstEventTimeout, and the clock's anchor.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from reconciler.status.managed_readiness import Verdict
from reconciler.status.published_types import GATED_MODES
from shared import constants as c
from shared.api import effective
from shared.api.duration import parse_go_duration
from shared.api.models import CacheBackend
from shared.backend_mode import Mode
from shared.conditions import (
    format_time,
    parse_time,
)

# A requeue scheduled exactly at a deadline can land a hair early; a small margin
# makes the flip happen on the first look after the deadline.
DEADLINE_MARGIN_SECONDS: Final = 0.5
DEFAULT_FIRST_EVENT_TIMEOUT_SECONDS: Final = 300.0


def kv_event_gate_enabled(cb: CacheBackend) -> bool:
    """Opt-out per CR with inferencecache.io/require-kv-events: "false"."""
    value = (cb.metadata.annotations or {}).get(c.ANNOTATION_REQUIRE_KV_EVENTS)
    return not (value is not None and value.strip().lower() == "false")


def first_event_timeout_seconds(cb: CacheBackend) -> float:
    """The KV-event gate's window. "0" is no grace period: the gate reports
    NoKVEventsObserved as soon as the backend is up, until the first event (the gate
    itself is turned off with the require-kv-events annotation, not with 0). A negative
    value (stored before admission rejected it) counts as 0; an unparsable one as 5m."""
    parsed = parse_go_duration(effective.first_event_timeout(cb.spec))
    return DEFAULT_FIRST_EVENT_TIMEOUT_SECONDS if parsed is None else max(parsed, 0.0)


def first_available_anchor(
    mode: Mode,
    prev_status: dict[str, Any],
    available_now: bool,
    now: dt.datetime,
) -> tuple[str | None, bool]:
    """status.firstAvailableAt: the write-once anchor of the firstEventTimeout clock.

    Returns (value, reanchored). Managed latches the first time its workload is seen
    Available; events-only and host-only (no workload) latch on the first reconcile.
    The anchor belongs to one serving mode: a managed→no-workload flip (previous
    status had a managed endpoint) re-anchors to the flip moment; a
    no-workload→managed flip discards the old anchor (the previous status had no
    endpoint, which a managed backend always publishes once its Service exists);
    an unmanaged transition (External, HiCache, unsupported) clears it.
    """
    prev = prev_status.get("firstAvailableAt") or None
    prev_endpoint = prev_status.get("endpoint") or ""
    stamp = format_time(now)
    if mode not in GATED_MODES:
        return None, False
    if mode == Mode.MANAGED:
        if prev and not prev_endpoint:
            prev = None  # anchored by a no-workload mode: not this mode's clock
        if prev:
            return prev, False
        return (stamp, True) if available_now else (None, False)
    # events-only / host-only: "up" the moment they exist.
    if prev_endpoint:
        return stamp, True
    if prev:
        return prev, False
    return stamp, True


def first_kv_event_latch(
    prev_status: dict[str, Any], gate_runs: bool, now: dt.datetime
) -> str | None:
    """status.firstKVEventObservedAt: write-once, never cleared. Set the first time the
    KV-event readiness gate observes indexParticipation.lastEventAt populated — the
    gate runs once the backend is up (a managed workload Available; host-only and
    events-only at once) unless opted out; left in place (inert) everywhere else."""
    prev = prev_status.get("firstKVEventObservedAt") or None
    if prev or not gate_runs:
        return prev
    # An absent, unparseable or zero timestamp (the Unix epoch, or Go's zero time
    # 0001-01-01T00:00:00Z) is "not yet observed", never an event.
    last_event = parse_time((prev_status.get("indexParticipation") or {}).get("lastEventAt"))
    if last_event is not None and last_event > _EPOCH:
        return format_time(now)
    return None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class GateResult:
    verdict: Verdict
    # Seconds until the timeout would flip Awaiting→NoKVEventsObserved.
    deadline_in: float | None = None


def kv_event_gate(
    cb: CacheBackend,
    base: Verdict,
    *,
    anchor: str | None,
    event_observed: bool,
    previous_ready_reason: str | None,
    reanchored: bool,
    now: dt.datetime,
) -> GateResult:
    """KV-event readiness gate, overlaid on an otherwise-Ready base verdict.

    Awaiting (within firstEventTimeout) → Ready=False/AwaitingFirstKVEvent; an event
    ever observed → Ready=True/KVEventsObserved; past the timeout →
    Ready=False/NoKVEventsObserved + Degraded. NoKVEventsObserved is sticky until an
    event arrives (a re-anchor on a mode change bypasses it).
    """
    if not base.ready or not kv_event_gate_enabled(cb):
        return GateResult(base)
    if event_observed:
        return GateResult(
            Verdict(
                True,
                c.REASON_KV_EVENTS_OBSERVED,
                "At least one KV event has been observed for this backend.",
            )
        )
    timeout = first_event_timeout_seconds(cb)
    timeout_text = effective.first_event_timeout(cb.spec)
    no_events = Verdict(
        False,
        c.REASON_NO_KV_EVENTS_OBSERVED,
        f"No KV event observed within firstEventTimeout ({timeout_text}): check that engine "
        "pods are wired to this backend and that their --kv-events-config publisher is bound.",
        degraded=True,
    )
    if previous_ready_reason == c.REASON_NO_KV_EVENTS_OBSERVED and not reanchored:
        return GateResult(no_events)
    anchor_time = parse_time(anchor) or now
    remaining = timeout - (now - anchor_time).total_seconds()
    if remaining <= 0:
        return GateResult(no_events)
    return GateResult(
        Verdict(
            False,
            c.REASON_AWAITING_FIRST_KV_EVENT,
            f"Backend is up; waiting for the first KV event (firstEventTimeout {timeout_text}).",
            progressing=True,
        ),
        deadline_in=remaining,
    )
