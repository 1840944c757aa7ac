"""Pure decisions about which existing objects the controller may write or delete.

The controller writes an object only if it is absent or carries a *controller*
ownerReference to this very CacheBackend (matched by uid, so a same-named
CacheBackend recreated after a delete does not inherit its predecessor's objects
before the garbage collector removes them). Anything else with a rendered name —
a team's hand-made ``chat-redis`` Service, an HPA of another controller — is a
name conflict: left byte-for-byte untouched, reported on the backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.objects import meta

# How soon a conflicted backend looks again: nothing watches the foreign object
# (it carries none of our labels or owner references), so its removal is only
# noticed by polling.
NAME_CONFLICT_REQUEUE_SECONDS: Final = 10.0


@dataclass(frozen=True, order=True)
class NameConflict:
    """An existing object whose name a rendered object needs, not owned by us."""

    kind: str
    name: str
    # Who does control it, when someone does ("" for an unowned object).
    controller: str = ""


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller ownerReference of ``obj`` (at most one, by API validation)."""
    for ref in meta(obj).owner_references:
        if ref.get("controller"):
            return dict(ref)
    return None


def owned_by(obj: Mapping[str, Any], cb_uid: str | None) -> bool:
    """Whether ``obj`` is controlled by the CacheBackend with uid ``cb_uid``.

    A plain (non-controller) reference is not ownership: another controller or a
    user may have added it for garbage collection alone.
    """
    ref = controller_of(obj)
    return bool(cb_uid) and ref is not None and ref.get("uid") == cb_uid


def name_conflicts(
    desired: Iterable[Mapping[str, Any]],
    existing: Mapping[tuple[str, str], Mapping[str, Any] | None],
    cb_uid: str | None,
) -> list[NameConflict]:
    """Every rendered object whose name is taken by an object we do not control.

    ``existing`` maps (kind, name) of a rendered object to the live object of that
    name (None or missing: absent). Sorted, so the status message is stable.
    """
    out: list[NameConflict] = []
    for obj in desired:
        key = (str(obj["kind"]), meta(obj).name)
        live = existing.get(key)
        if live is None or owned_by(live, cb_uid):
            continue
        ref = controller_of(live)
        controller = f"{ref.get('kind')}/{ref.get('name')}" if ref is not None else ""
        out.append(NameConflict(key[0], key[1], controller))
    return sorted(out)


def name_conflict_message(conflicts: Iterable[NameConflict]) -> str:
    """The Ready condition (and Event) message: each kind and name, and what to do."""
    parts = []
    for c in conflicts:
        part = f"{c.kind} {c.name}"
        if c.controller:
            part += f" (controlled by {c.controller})"
        parts.append(part)
    if not parts:
        return ""
    subject = "; ".join(parts)
    verb, it = ("exists and is", "it is") if len(parts) == 1 else ("exist and are", "they are")
    return (
        f"{subject} already {verb} not owned by this CacheBackend: left untouched; "
        f"nothing is provisioned until {it} deleted or renamed."
    )
