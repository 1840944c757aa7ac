"""Condition helpers: lastTransitionTime moves only when the status changes."""

from __future__ import annotations

import datetime as dt

from shared.conditions import (
    DesiredCondition,
    format_time,
    merge_conditions,
    normalised,
    parse_time,
)

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def ready(status: str, reason: str = "BackendReady", message: str = "m") -> DesiredCondition:
    return DesiredCondition("Ready", status, reason, message)


def test_new_condition_gets_now_as_last_transition_time_and_generation() -> None:
    [cond] = merge_conditions([], [ready("True")], keep=frozenset(), generation=3, now=T0)
    assert cond == {
        "type": "Ready",
        "status": "True",
        "reason": "BackendReady",
        "message": "m",
        "lastTransitionTime": "2026-01-01T12:00:00Z",
        "observedGeneration": 3,
    }


def test_last_transition_time_kept_when_only_reason_or_message_changes() -> None:
    first = merge_conditions(
        [], [ready("False", "RolloutInProgress")], keep=frozenset(), generation=1, now=T0
    )
    second = merge_conditions(
        first,
        [ready("False", "AwaitingFirstKVEvent", "other")],
        keep=frozenset(),
        generation=1,
        now=T1,
    )
    assert second[0]["lastTransitionTime"] == format_time(T0)
    assert second[0]["reason"] == "AwaitingFirstKVEvent"


def test_last_transition_time_moves_when_status_changes() -> None:
    first = merge_conditions([], [ready("False")], keep=frozenset(), generation=1, now=T0)
    second = merge_conditions(first, [ready("True")], keep=frozenset(), generation=1, now=T1)
    assert second[0]["lastTransitionTime"] == format_time(T1)


def test_identical_input_yields_identical_output() -> None:
    first = merge_conditions([], [ready("True")], keep=frozenset(), generation=1, now=T0)
    assert merge_conditions(first, [ready("True")], keep=frozenset(), generation=1, now=T1) == first


def test_foreign_conditions_kept_only_when_allowed() -> None:
    existing = [
        {
            "type": "EngineKernelsHealthy",
            "status": "True",
            "reason": "KernelsHealthy",
            "message": "",
            "lastTransitionTime": "x",
        },
        {
            "type": "FunctionalProbeOK",
            "status": "True",
            "reason": "ProbeOK",
            "message": "",
            "lastTransitionTime": "x",
        },
    ]
    out = merge_conditions(
        existing, [ready("True")], keep=frozenset({"EngineKernelsHealthy"}), generation=1, now=T0
    )
    assert [c["type"] for c in out] == ["Ready", "EngineKernelsHealthy"]


def test_time_round_trip_and_bad_values() -> None:
    assert parse_time(format_time(T0)) == T0
    assert parse_time("2026-01-01T12:00:00+00:00") == T0
    assert parse_time("") is None
    assert parse_time("garbage") is None


def test_normalised_ignores_order() -> None:
    a = [{"type": "Ready"}, {"type": "Degraded"}]
    assert normalised(a) == normalised(list(reversed(a)))
