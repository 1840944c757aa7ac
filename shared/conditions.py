"""Pure helpers for Kubernetes-style conditions (metav1.Condition) on the status.

Conditions are kept in their wire form (camelCase dicts) so a status read from the
API server round-trips unchanged. The one rule that matters for idle reconciles:
``lastTransitionTime`` moves only when a condition's *status* changes; a new reason
or message keeps the old timestamp (as apimachinery's SetStatusCondition does).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"


@dataclass(frozen=True)
class DesiredCondition:
    """A condition as the status computation wants it, before timestamps are applied."""

    type: str
    status: str
    reason: str
    message: str


def as_desired(current: dict[str, Any] | None) -> DesiredCondition | None:
    """A condition as it stands in the status, as the desired one: how a rule keeps its
    prior verdict when the observation it needs could not be made."""
    if current is None:
        return None
    return DesiredCondition(
        str(current.get("type") or ""),
        str(current.get("status") or UNKNOWN),
        str(current.get("reason") or ""),
        str(current.get("message") or ""),
    )


def format_time(when: dt.datetime) -> str:
    """RFC 3339 at second precision in UTC, the way metav1.Time serialises."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> dt.datetime | None:
    """Parse an RFC 3339 timestamp; None for absent or unparseable values."""
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed


def find(conditions: Iterable[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def status_of(conditions: Iterable[dict[str, Any]] | None, type_: str) -> str | None:
    cond = find(conditions, type_)
    return cond.get("status") if cond else None


def reason_of(conditions: Iterable[dict[str, Any]] | None, type_: str) -> str | None:
    cond = find(conditions, type_)
    return cond.get("reason") if cond else None


def is_true(conditions: Iterable[dict[str, Any]] | None, type_: str) -> bool:
    return status_of(conditions, type_) == TRUE


def materialise(
    desired: DesiredCondition,
    previous: dict[str, Any] | None,
    generation: int | None,
    now: dt.datetime,
) -> dict[str, Any]:
    """The wire form of ``desired``, keeping the previous lastTransitionTime when the
    status did not change (reason/message edits are not transitions)."""
    if (
        previous is not None
        and previous.get("status") == desired.status
        and previous.get("lastTransitionTime")
    ):
        transition = previous["lastTransitionTime"]
    else:
        transition = format_time(now)
    cond: dict[str, Any] = {
        "type": desired.type,
        "status": desired.status,
        "reason": desired.reason,
        "message": desired.message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def merge_conditions(
    existing: Sequence[dict[str, Any]] | None,
    desired: Sequence[DesiredCondition],
    *,
    keep: frozenset[str],
    generation: int | None,
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """New condition list: every ``desired`` condition, then the existing conditions
    whose type is in ``keep`` (written by someone else and still legal in this mode).
    Everything else is dropped — a mode change removes conditions the new mode does
    not publish."""
    out = [materialise(d, find(existing, d.type), generation, now) for d in desired]
    owned = {d.type for d in desired}
    for cond in existing or ():
        if cond.get("type") in keep and cond.get("type") not in owned:
            out.append(dict(cond))
    return out


def normalised(conditions: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Order-insensitive form for comparing two condition lists."""
    return sorted((dict(c) for c in conditions or ()), key=lambda c: str(c.get("type")))
