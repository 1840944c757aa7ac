"""The kwok manifests and trigger patches of tests/harness/kwok.py (pure functions; the
stages themselves run in tests/integration/harness/test_controllers_harness.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.builders import restarted_pod as pod
from tests.harness import kwok


def wanted(patch: dict[str, object]) -> dict[str, int]:
    annotations = patch["metadata"]["annotations"]  # type: ignore[index]
    value: dict[str, int] = json.loads(annotations[kwok.RESTARTS_ANNOTATION])
    return value


def test_restart_patch_asks_for_one_more_restart_than_the_live_count() -> None:
    assert wanted(kwok.restart_patch(pod({"server": 0, "proxy": 3}), ["server"])) == {"server": 1}
    # Targets already asked for are kept; a pending one is not asked twice.
    live = pod({"server": 1, "proxy": 3}, json.dumps({"server": 1}))
    assert wanted(kwok.restart_patch(live, ["proxy"])) == {"server": 1, "proxy": 4}
    pending = pod({"server": 0}, json.dumps({"server": 1}))
    assert wanted(kwok.restart_patch(pending, ["server"])) == {"server": 2}
    assert wanted(kwok.restart_patch(pod({}, "not json"), ["x"])) == {"x": 1}


def test_readiness_and_fail_patches() -> None:
    assert kwok.readiness_patch(False) == {
        "metadata": {"annotations": {kwok.READY_ANNOTATION: "false"}}
    }
    # Ready again removes the annotation (null in a merge patch).
    assert kwok.readiness_patch(True) == {
        "metadata": {"annotations": {kwok.READY_ANNOTATION: None}}
    }
    assert kwok.fail_patch() == {"metadata": {"annotations": {kwok.FAIL_ANNOTATION: "true"}}}


def test_gpu_nodes_carry_capacity_and_taint_cpu_nodes_neither() -> None:
    gpu, cpu = kwok.FakeNode("g", gpus=8).manifest(), kwok.FakeNode("c").manifest()
    assert gpu["status"]["capacity"][kwok.GPU_RESOURCE] == "8"
    assert gpu["status"]["allocatable"] == gpu["status"]["capacity"]
    assert gpu["spec"]["taints"][0]["key"] == kwok.GPU_RESOURCE
    assert kwok.GPU_RESOURCE not in cpu["status"]["capacity"]
    assert "taints" not in cpu["spec"]
    for node in (gpu, cpu):
        assert node["metadata"]["annotations"] == {
            kwok.MANAGED_NODE_ANNOTATION: kwok.MANAGED_NODE_VALUE
        }
    assert any(n.gpus for n in kwok.DEFAULT_NODES)
    assert any(not n.gpus for n in kwok.DEFAULT_NODES)


def test_config_holds_the_options_kwoks_default_stages_and_the_harness_stages(
    tmp_path: Path,
) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    for name in kwok.DEFAULT_STAGE_FILES:
        stage = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
                 "metadata": {"name": name.removesuffix(".yaml")}}  # fmt: skip
        (stages / name).write_text(yaml.safe_dump(stage))
    docs = list(yaml.safe_load_all(kwok.write_config(tmp_path / "kwok.yaml", stages).read_text()))
    assert docs[0]["kind"] == "KwokConfiguration"
    assert docs[0]["options"]["manageNodesWithAnnotationSelector"] == "kwok.x-k8s.io/node=fake"
    names = [d["metadata"]["name"] for d in docs[1:]]
    assert names == [
        *(n.removesuffix(".yaml") for n in kwok.DEFAULT_STAGE_FILES),
        "harness-container-restart",
        "harness-pod-fail",
        "harness-pod-unready",
        "harness-pod-ready-again",
    ]
