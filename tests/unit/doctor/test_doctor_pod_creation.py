"""icache doctor names the cause and the fix of a tier whose pods are refused
(decision "A tier that cannot start says why")."""

from __future__ import annotations

from typing import Any

import pytest

from icache_install.doctor.backends import check_backend
from icache_install.doctor.pod_creation import DEFAULT_FIX, check_pod_creation, pod_creation_fix

PSA = (
    'The Deployment cannot create its pods: pods "c-redis-1" is forbidden: violates '
    'PodSecurity "restricted:latest": runAsUser=0 (pod must not set runAsUser=0)'
)
QUOTA = (
    'The Deployment cannot create its pods: pods "c-redis-1" is forbidden: exceeded quota: '
    "q, requested: limits.memory=8Gi, used: limits.memory=0, limited: limits.memory=1Gi"
)


def refused(message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "team", "generation": 1},
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PodCreationFailed",
                    "message": message,
                },
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "PodCreationFailed",
                    "message": message,
                },
                {"type": "Degraded", "status": "False", "reason": "NotDegraded"},
            ],
        },
    }


@pytest.mark.parametrize(
    ("message", "fix_mentions"),
    [(PSA, "spec.template"), (QUOTA, "ResourceQuota")],
)
def test_the_cause_and_its_fix(message: str, fix_mentions: str) -> None:
    """The finding carries the API server's refusal and the fix for its kind."""
    [found] = check_pod_creation(refused(message))
    assert found.code == "backend.PodCreationFailed"
    assert found.severity == "error"
    assert message in found.message
    assert fix_mentions in found.next_step


def test_an_unknown_refusal_gets_the_generic_step() -> None:
    assert pod_creation_fix("admission webhook denied the request") == DEFAULT_FIX


def test_no_finding_without_the_reason() -> None:
    ok = refused(PSA)
    ok["status"]["conditions"][0]["reason"] = "RolloutInProgress"
    assert check_pod_creation(ok) == []


def test_the_conditions_are_known_reasons() -> None:
    """Ready/Progressing PodCreationFailed are in doctor's table (not UnknownCondition)."""
    codes = {f.code for f in check_backend(refused(PSA), [])}
    assert {
        "backend.Ready.PodCreationFailed",
        "backend.Progressing.PodCreationFailed",
        "backend.PodCreationFailed",
    } <= codes
    assert "backend.UnknownCondition" not in codes
