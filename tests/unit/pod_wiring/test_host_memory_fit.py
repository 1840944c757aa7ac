"""Host memory that fits (docs/api.md, "Host memory per pod"; docs/decisions.md, "The
host-memory budget is per pod"): the budget is what the engine pod pins whatever its
parallelism, and a container whose memory limit cannot hold what the wiring pins gets
an admission warning (the pod is still admitted and wired)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_cli.main import main
from shared import constants as c
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from shared.quantity import parse_quantity
from shared.runtime_adapters.base import InjectContext
from shared.runtime_adapters.host_memory_fit import (
    host_memory_warning,
    pinned_host_memory,
    pinned_host_memory_exceeds_limit,
)
from tests.builders import NS, admission_review, annotations_of, backend, container, env_of, pod
from tests.fakes import mutate_pod
from tests.samples import SAMPLES_DIR
from webhook_svc.admission_review import AdmissionRequest, parse_review

GIB = 1024**3
CTX = InjectContext()


def sample(file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(CacheBackend, Deployment) of a shipped sample."""
    docs = [d for d in yaml.safe_load_all((SAMPLES_DIR / file).read_text()) if d]
    return docs[0], docs[1]


def lmcache_rule(value: str) -> int:
    """LMCache 0.4.7 / 0.5.6: MixedMemoryAllocator(int(max_local_cpu_size * 1024**3))."""
    return int(float(value) * GIB)


VLLM_SHAPES: list[tuple[list[str], int]] = [
    ([], 1),
    (["-tp", "2"], 2),
    (["--tensor-parallel-size", "4"], 4),
    (["--tensor-parallel-size=8"], 8),
    (["-tp", "2", "--pipeline-parallel-size", "2"], 4),
    (["-tp=3"], 3),
    (["-tp", "2", "-dp", "3"], 6),
    (["-tp", "2", "-dp", "4", "-dpl", "2"], 4),
    (["-tp", "4", "-dp", "4", "-dpn", "1"], 4),
    (["-tp", "7"], 7),
]
LIMITS = [None, "8Gi", "31Gi", "32Gi", "64Gi"]


def admit_pod_cli(
    tmp_path: Path, backend_doc: dict[str, Any], deployment: dict[str, Any], capsys: Any
) -> dict[str, Any]:
    """`icache admit-pod -o json` on one Deployment: its report."""
    (tmp_path / "backends").mkdir(exist_ok=True)
    (tmp_path / "backends" / "b.yaml").write_text(yaml.safe_dump(backend_doc))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(deployment))
    argv = ["admit-pod", "-f", str(tmp_path / "d.yaml")]
    assert main([*argv, "--backends-from", str(tmp_path / "backends"), "-o", "json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)[0]
    report["stderr"] = captured.err
    return dict(report)


def _wired_template(report: dict[str, Any], deployment: dict[str, Any]) -> dict[str, Any]:
    import jsonpatch

    template = deployment["spec"]["template"]
    before = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(template)}
    before["metadata"] = {**before.get("metadata", {}), "namespace": "default"}
    before["metadata"]["generateName"] = f"{deployment['metadata']['name']}-"
    return dict(jsonpatch.apply_patch(before, report["patch"]))


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize(("args", "processes"), VLLM_SHAPES)
def test_vllm_sample_pins_the_budget_and_warns_exactly_when_the_limit_cannot_hold_it(
    args: list[str], processes: int, limit: str | None, tmp_path: Path, capsys: Any
) -> None:
    """The vllm-host-only sample, each parallelism shape and limit: what LMCache pins
    in the pod is at most the budget and at least 90 % of it; a warning exactly when
    the container's limit is below it."""
    cb, deployment = sample("vllm-lmcache-host-only.yaml")
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    engine["args"] = [*engine["args"], *args]
    if limit:
        engine["resources"]["limits"]["memory"] = limit
    report = admit_pod_cli(tmp_path, cb, deployment, capsys)
    assert report["outcome"] == OUTCOME_INJECTED
    wired = _wired_template(report, deployment)
    value = env_of(wired["spec"]["containers"][0])["LMCACHE_MAX_LOCAL_CPU_SIZE"]
    pinned = lmcache_rule(value) * processes
    budget = int(parse_quantity(cb["spec"]["lmCache"]["hostMemory"]["capacity"]))
    assert 0.9 * budget <= pinned <= budget, (value, processes)
    over = limit is not None and pinned > parse_quantity(limit)
    assert bool(report["warnings"]) is over, report["warnings"]
    if over:
        (warning,) = report["warnings"]
        assert "'vllm'" in warning
        assert f"resources.limits.memory {limit}" in warning
        assert f"Warning: Deployment default/vllm-llama: {warning}" in report["stderr"]


@pytest.mark.parametrize("limit", [None, "8Gi", "33Gi", "64Gi"])
@pytest.mark.parametrize("tp", ["1", "4", "8"])
def test_sglang_mp_worker_holds_the_whole_budget_once(
    tp: str, limit: str | None, tmp_path: Path, capsys: Any
) -> None:
    """The sglang-host-only sample: the MP worker is one process, its --l1-size-gb the
    whole budget whatever --tp-size; the engine container sharing its /dev/shm volume
    is warned about exactly when its limit cannot hold that L1."""
    cb, deployment = sample("sglang-lmcache-host-only.yaml")
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    engine["args"] = [*engine["args"], "--tp-size", tp]
    if limit:
        engine["resources"]["limits"]["memory"] = limit
    report = admit_pod_cli(tmp_path, cb, deployment, capsys)
    wired = _wired_template(report, deployment)
    (worker,) = wired["spec"]["initContainers"]
    l1 = int(worker["args"][worker["args"].index("--l1-size-gb") + 1]) * GIB
    budget = int(parse_quantity(cb["spec"]["lmCache"]["hostMemory"]["capacity"]))
    assert 0.9 * budget <= l1 <= budget
    over = limit is not None and parse_quantity(limit) < l1
    assert bool(report["warnings"]) is over
    if over:
        (warning,) = report["warnings"]
        assert "'sglang' pins 32 GiB" in warning
        assert "lmcache-mp-worker L1" in warning


def vllm_pod(
    limit: str | None, *args: str, env: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    resources = {"limits": {"memory": limit}} if limit else {}
    return pod(
        container(
            command=["vllm", "serve", "m", *args],
            resources=resources,
            env=env or [],
        )
    )


def host_backend(capacity: str = "32Gi", **spec: Any) -> dict[str, Any]:
    return backend(lmCache={"hostMemory": {"capacity": capacity}}, **spec)


def test_a_container_without_a_memory_limit_gets_no_warning() -> None:
    result = wire_pod(vllm_pod(None, "-tp", "2"), [host_backend("1Ti")], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert result.warnings == ()


def test_the_webhook_admits_wires_and_warns() -> None:
    """Fail-open: the pod is wired and allowed; the response carries the warning."""
    review = admission_review(vllm_pod("16Gi", "--tensor-parallel-size", "4"), namespace=NS)
    request: AdmissionRequest = parse_review(review)
    response, outcome, _ = mutate_pod(request, lambda _namespace: [host_backend()], CTX)
    assert response["response"]["allowed"] is True
    assert outcome == OUTCOME_INJECTED
    assert response["response"].get("patch")
    (warning,) = response["response"]["warnings"]
    assert "'vllm' pins 32 GiB" in warning
    assert "resources.limits.memory 16Gi" in warning
    assert len(warning) <= 256  # the API server's bound on one warning


def test_operator_lmcache_size_is_not_divided_but_counted_per_process() -> None:
    """LMCACHE_MAX_LOCAL_CPU_SIZE through engineOverrides.env is the operator's per-process
    value: not divided, and the check counts it times the processes."""
    cb = host_backend(
        integration={
            "engineOverrides": {"env": [{"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": "10"}]}
        }
    )
    result = wire_pod(vllm_pod("32Gi", "-tp", "4"), [cb], CTX)
    engine = result.pod["spec"]["containers"][0]
    assert env_of(engine)["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "10"
    (warning,) = result.warnings
    assert "pins 40 GiB" in warning
    assert "x 4 processes" in warning


def test_unreadable_count_is_annotated_logged_and_sized_for_one_process() -> None:
    result = wire_pod(vllm_pod(None, "--config", "/etc/vllm.yaml"), [host_backend()], CTX)
    assert env_of(result.pod["spec"]["containers"][0])["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "32.0"
    note = annotations_of(result.pod)[c.ANNOTATION_HOST_MEMORY_PROCESSES]
    assert note.startswith("1 (unreadable: --config")
    assert note in result.message


def test_read_count_is_annotated_and_one_process_is_not() -> None:
    wired = wire_pod(vllm_pod(None, "-tp", "4"), [host_backend()], CTX).pod
    assert annotations_of(wired)[c.ANNOTATION_HOST_MEMORY_PROCESSES] == "4"
    assert env_of(wired["spec"]["containers"][0])["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "8.0"
    single = wire_pod(vllm_pod(None), [host_backend()], CTX).pod
    assert c.ANNOTATION_HOST_MEMORY_PROCESSES not in annotations_of(single)
    # Re-admitting a wired pod converges: the same pod, the same annotation.
    assert wire_pod(wired, [host_backend()], CTX).pod == wired


def hicache_pod(limit: str | None, *args: str) -> dict[str, Any]:
    resources = {"limits": {"memory": limit}} if limit else {}
    command = ["python3", "-m", "sglang.launch_server", "--model-path", "m", *args]
    return pod(
        container("sglang", image="lmsysorg/sglang:v0.5.13", command=command, resources=resources)
    )


def test_hicache_size_is_per_rank() -> None:
    """--hicache-size is GB (10^9 bytes) per rank: sizeGB x ranks against the limit."""
    p = hicache_pod(
        "100Gi", "--tp-size", "4", "--enable-hierarchical-cache", "--hicache-size", "30"
    )
    (pin,) = pinned_host_memory_exceeds_limit(p)
    assert pin.pinned_bytes == 4 * 30 * 10**9
    assert "x 4 ranks" in host_memory_warning(pin)
    fits = hicache_pod(
        "120Gi", "--tp-size", "4", "--enable-hierarchical-cache", "--hicache-size", "30"
    )
    assert pinned_host_memory_exceeds_limit(fits) == []


def test_hicache_ratio_gets_no_check() -> None:
    p = hicache_pod("1Gi", "--tp-size", "4", "--enable-hierarchical-cache", "--hicache-ratio", "2")
    assert pinned_host_memory(p) == []


def test_hicache_backend_wiring_warns_through_the_webhook() -> None:
    cb = backend(runtime=c.RUNTIME_SGLANG, type_=c.TYPE_SGLANG_HICACHE, hiCache={"sizeGB": 20})
    result = wire_pod(hicache_pod("32Gi", "--tp-size", "2"), [cb], CTX)
    assert result.outcome == OUTCOME_INJECTED
    (warning,) = result.warnings
    assert "'sglang' pins" in warning
    assert "--hicache-size 20 GB x 2 ranks" in warning


def test_a_stale_processes_annotation_is_dropped_by_other_wirings() -> None:
    """Only the vLLM wiring divides the budget: a copied annotation does not survive
    another adapter or events-only."""
    stale = {c.ANNOTATION_HOST_MEMORY_PROCESSES: "4"}
    cb = backend(runtime=c.RUNTIME_SGLANG, type_=c.TYPE_SGLANG_HICACHE, hiCache={"sizeGB": 20})
    p = hicache_pod(None, "--tp-size", "2")
    p["metadata"]["annotations"] = stale
    wired = wire_pod(p, [cb], CTX).pod
    assert c.ANNOTATION_HOST_MEMORY_PROCESSES not in annotations_of(wired)
    p = vllm_pod(None, "-tp", "4")
    p["metadata"]["annotations"] = {c.ANNOTATION_HOST_MEMORY_PROCESSES: "1"}
    assert (
        annotations_of(wire_pod(p, [host_backend()], CTX).pod)[c.ANNOTATION_HOST_MEMORY_PROCESSES]
        == "4"
    )
