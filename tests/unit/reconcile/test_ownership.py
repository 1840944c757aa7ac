"""The pure ownership decisions — never adopt or overwrite an object
this controller does not own."""

from __future__ import annotations

from typing import Any

from reconciler.status.events import name_conflict_event
from reconciler.status.managed_readiness import name_conflict_verdict
from reconciler.status.ownership import (
    NameConflict,
    name_conflict_message,
    name_conflicts,
    owned_by,
)

UID = "cb-uid"


def obj(kind: str, name: str, *refs: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if refs:
        meta["ownerReferences"] = list(refs)
    return {"kind": kind, "metadata": meta}


def ref(uid: str, *, controller: bool | None = True, kind: str = "CacheBackend") -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "x/v1", "kind": kind, "name": "owner", "uid": uid}
    if controller is not None:
        out["controller"] = controller
    return out


def test_owned_by_needs_a_controller_reference_with_our_uid() -> None:
    assert owned_by(obj("Service", "s", ref(UID)), UID)
    assert not owned_by(obj("Service", "s"), UID), "no owner at all"
    assert not owned_by(obj("Service", "s", ref("other-uid")), UID), "a predecessor's"
    assert not owned_by(obj("Service", "s", ref(UID, controller=False)), UID), "GC-only ref"
    assert not owned_by(obj("Service", "s", ref(UID, controller=None)), UID)
    assert not owned_by(obj("Service", "s", ref(UID)), None), "no uid: never ours"
    assert not owned_by(obj("Service", "s", ref(UID)), "")
    # Ours as a plain ref, someone else's as controller: not ours.
    assert not owned_by(obj("Service", "s", ref(UID, controller=False), ref("x", kind="Foo")), UID)


def test_name_conflicts_lists_every_foreign_object_sorted_and_ignores_absent_or_owned() -> None:
    desired = [obj("Deployment", "cb-redis"), obj("Service", "cb-redis"), obj("HPA", "cb-redis")]
    existing: dict[tuple[str, str], dict[str, Any] | None] = {
        ("Deployment", "cb-redis"): obj("Deployment", "cb-redis", ref(UID)),
        ("Service", "cb-redis"): obj("Service", "cb-redis", ref("u2", kind="Other")),
        ("HPA", "cb-redis"): obj("HPA", "cb-redis"),
    }
    assert name_conflicts(desired, existing, UID) == [
        NameConflict("HPA", "cb-redis"),
        NameConflict("Service", "cb-redis", "Other/owner"),
    ]
    assert name_conflicts(desired, {}, UID) == []
    assert name_conflicts(desired, {("Service", "cb-redis"): None}, UID) == []


def test_name_conflict_message_names_kind_and_name() -> None:
    one = name_conflict_message([NameConflict("Service", "chat-redis")])
    assert one.startswith("Service chat-redis already exists and is not owned")
    two = name_conflict_message(
        [NameConflict("Deployment", "a", "ReplicaSet/x"), NameConflict("Service", "a")]
    )
    assert "Deployment a (controlled by ReplicaSet/x); Service a already exist and are" in two
    assert name_conflict_message([]) == ""


def test_name_conflict_verdict_is_not_ready_and_degraded() -> None:
    assert name_conflict_verdict(()) is None
    v = name_conflict_verdict((NameConflict("Service", "s"),))
    assert v is not None
    assert (v.ready, v.reason, v.degraded) == (False, "NameConflict", True)
    assert "Service s" in v.message


def _ready(reason: str, message: str) -> dict[str, Any]:
    return {
        "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message}]
    }


def test_name_conflict_event_fires_on_entering_or_changing_the_conflict_only() -> None:
    entered = name_conflict_event(_ready("RolloutInProgress", "x"), _ready("NameConflict", "m"))
    assert entered is not None
    assert (entered.type, entered.reason, entered.message) == ("Warning", "NameConflict", "m")
    assert name_conflict_event({}, _ready("NameConflict", "m")) is not None
    assert name_conflict_event(_ready("NameConflict", "m"), _ready("NameConflict", "m")) is None
    assert name_conflict_event(_ready("NameConflict", "m"), _ready("NameConflict", "m2"))
    assert (
        name_conflict_event(_ready("NameConflict", "m"), _ready("RolloutInProgress", "m")) is None
    )
