"""`icache doctor` reports a pod the Pod webhook declined because its own
``--kv-offloading-size`` overwrites the connector, and explains the backend's
EngineOffloading condition (docs/doctor.md)."""

from __future__ import annotations

from typing import Any

from icache_install.doctor import conditions
from icache_install.doctor.findings import Severity
from icache_install.doctor.pods import WebhookState, check_pod
from shared import constants as c

BACKEND: dict[str, Any] = {
    "apiVersion": c.API_VERSION,
    "kind": c.KIND,
    "metadata": {"name": "cb", "namespace": "ns", "uid": "u1"},
    "spec": {"runtime": "VLLM", "engineSelector": {"matchLabels": {"app": "engine"}}},
}


def labelled_pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "engine-0",
            "namespace": "ns",
            "labels": {"app": "engine"},
            "annotations": annotations,
        }
    }


def test_declined_pod_is_a_warning_naming_the_flag() -> None:
    declined = labelled_pod(
        {
            c.ANNOTATION_INJECT_DECLINED: c.REASON_ENGINE_OFFLOADING_CONFLICT,
            c.ANNOTATION_INJECT_DECLINED_BY: "ns/cb",
        }
    )
    (found,) = check_pod(declined, [BACKEND], WebhookState(available=True, available_since=None))
    assert found.code == "pod.EngineOffloadingConflict"
    assert found.severity is Severity.WARNING
    assert "--kv-offloading-size" in found.message
    assert found.details["selectedBy"] == "ns/cb"


def test_an_unwired_pod_without_the_record_is_not_reported_as_declined() -> None:
    (found,) = check_pod(
        labelled_pod({}), [BACKEND], WebhookState(available=True, available_since=None)
    )
    assert found.code != "pod.EngineOffloadingConflict"


def test_the_condition_has_an_explanation() -> None:
    explained = conditions.explain(c.COND_ENGINE_OFFLOADING, c.REASON_ENGINE_OFFLOADING_CONFLICT)
    assert explained is not None
    assert "--kv-offloading-size" in explained.sentence
