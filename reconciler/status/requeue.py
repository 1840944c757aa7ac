"""When a backend should be looked at again: the soonest of the delays a pass's steps
ask for (None: no step asked; the steady resync)."""

from __future__ import annotations


def soonest_requeue(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None
