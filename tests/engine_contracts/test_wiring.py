"""Every injected item of every sample backend, CRD enum value and Pod example, checked
against the published source of both pinned engine sets (shared/engine_versions.py).

A failure names the item, the release and why. Variables no reader reads are collected
for the report (test_unread.py), not failed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.engine_versions import NEWEST, VLLM, ReleaseSet
from shared.runtime_adapters.vllm_offloading import EVICTION_POLICY_VALUE
from tests.engine_contracts.cache import SOURCES, require_release
from tests.engine_contracts.cases import (
    OWN_IMAGES,
    VLLM_OFFLOADING_SHAPES,
    cases_of,
    crd_enums,
    example_case,
    example_pods,
    sample_backends,
    vllm_offloading_case,
)
from tests.engine_contracts.checks import check_engine_command, check_pod
from tests.engine_contracts.releases import SETS, read_set, releases, vllm_release

pytestmark = pytest.mark.engine_contracts


@pytest.mark.parametrize("set_name", sorted(SETS))
@pytest.mark.parametrize(
    ("sample", "doc"), sample_backends(), ids=[n for n, _ in sample_backends()]
)
def test_sample_wiring_is_accepted_by_the_engines(
    set_name: str, sample: str, doc: dict[str, Any]
) -> None:
    rel = releases(set_name)
    failures: dict[str, list[str]] = {}
    cases = list(cases_of(sample, SETS[set_name]))
    assert cases, f"{sample}: not one wired pod (the sample must wire once it has an endpoint)"
    assert cases[0].label == sample, f"{sample}: the sample itself does not wire"
    for case in cases:
        report = check_pod(rel, case.runtime, case.original, case.wired, case.endpoint, OWN_IMAGES)
        for failure in report.failures:
            failures.setdefault(failure, []).append(case.label)
    assert not failures, f"{rel.name}:\n" + "\n".join(
        f"{failure}\n    in: {', '.join(labels[:4])}"
        + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
        for failure, labels in failures.items()
    )


@pytest.mark.parametrize("set_name", sorted(SETS))
@pytest.mark.parametrize(("name", "pod"), example_pods(), ids=[n for n, _ in example_pods()])
def test_pod_example_wiring_is_accepted_by_the_engines(
    set_name: str, name: str, pod: dict[str, Any]
) -> None:
    rel = releases(set_name)
    case = example_case(name, pod)
    if case is None:
        return  # a fail-open or skip example: nothing injected, nothing to check
    report = check_pod(rel, case.runtime, case.original, case.wired, case.endpoint, OWN_IMAGES)
    assert not report.failures, f"{rel.name} [{name}]:\n" + "\n".join(report.failures)


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_shipped_engine_commands_are_accepted_whole(set_name: str) -> None:
    """The samples' and examples' engine containers start as shipped: every flag on
    them, the workload's own included, is a flag of the engine release."""
    rel = releases(set_name)
    cases = [cases_of(sample, SETS[set_name])[0] for sample, _ in sample_backends()]
    cases += [case for name, pod in example_pods() if (case := example_case(name, pod))]
    failures = [
        f"[{case.label}] {failure}"
        for case in cases
        for failure in check_engine_command(rel, case.runtime, case.wired)
    ]
    assert not failures, f"{rel.name}:\n" + "\n".join(dict.fromkeys(failures))


def _value_at(backend: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = backend.get("spec") or {}
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def test_every_crd_enum_value_is_wired_by_some_case() -> None:
    """The CRD's enum lists (manifests/crd/) are all exercised: each value appears in at
    least one sample variant the webhook wires (so the checks above saw it), or, for
    type VLLMOffloading (refused below vLLM 0.33.0, so not at the sample set), in the
    VLLMOffloading cases at the newest set (test_vllm_offloading_wiring_*)."""
    seen: set[tuple[tuple[str, ...], str]] = set()
    offloading = [
        case
        for policy in EVICTION_POLICY_VALUE
        if (case := vllm_offloading_case(NEWEST.vllm, "plain", policy)) is not None
    ]
    for cases in [*(cases_of(s, SETS["samples"]) for s, _ in sample_backends()), offloading]:
        for case in cases:
            for path in crd_enums():
                value = _value_at(case.backend, path)
                if value is not None:
                    seen.add((path, str(value)))
    missing = [
        f"spec.{'.'.join(path)}={value}"
        for path, values in crd_enums().items()
        for value in values
        if (path, value) not in seen
    ]
    assert not missing, f"CRD enum values no wired sample variant carries: {missing}"


# ------------------------------------------------------------------ VLLMOffloading

OFFLOADING_RELEASES = ("0.33.0", "0.34.0")


def offloading_releases(version: str) -> Any:
    """The sample set with vLLM moved to ``version`` (VLLMOffloading needs 0.33.0+)."""
    pinned = SETS["samples"]
    return read_set(f"vllm {version}", ReleaseSet(version, pinned.sglang, pinned.lmcache))


@pytest.mark.parametrize("policy", sorted(EVICTION_POLICY_VALUE))
@pytest.mark.parametrize("shape", sorted(VLLM_OFFLOADING_SHAPES))
@pytest.mark.parametrize("version", OFFLOADING_RELEASES)
def test_vllm_offloading_wiring_is_accepted_by_the_engine(
    version: str, shape: str, policy: str
) -> None:
    """Every flag and --kv-transfer-config key we render is vLLM's at 0.33.0 and 0.34.0:
    the connector (and MultiConnector) registered, the keys KVTransferConfig fields."""
    case = vllm_offloading_case(version, shape, policy)
    assert case is not None, f"VLLMOffloading {shape} is not wired at vLLM {version}"
    report = check_pod(
        offloading_releases(version), case.runtime, case.original, case.wired, None, OWN_IMAGES
    )
    assert not report.failures, "\n".join(report.failures)


@pytest.mark.parametrize("version", OFFLOADING_RELEASES)
def test_vllm_offloading_extra_config_keys_are_read_by_the_engine(version: str) -> None:
    """cpu_bytes_to_use and eviction_policy are the keys CPUOffloadingSpec reads, the
    policies we render (lru, arc) are CachePolicyFactory's, and the tier is the
    /dev/shm region file the emptyDir holds."""
    root = require_release(VLLM, version) / SOURCES / "vllm" / "v1" / "kv_offload" / "cpu"
    spec = (root / "spec.py").read_text()
    assert 'self.extra_config.get("cpu_bytes_to_use")' in spec
    assert 'self.extra_config.get("eviction_policy", "lru")' in spec
    factory = (root / "policies" / "factory.py").read_text()
    for policy in EVICTION_POLICY_VALUE.values():
        assert re.search(rf'register_cache_policy\(\s*"{policy}"', factory), policy
    region = (root / "shared_offload_region.py").read_text()
    assert 'f"/dev/shm/vllm_offload_{engine_id}.mmap"' in region


def test_vllm_offloading_is_refused_at_0_11_0_which_lacks_the_flags() -> None:
    """0.11.0 has no --kv-offloading-size and its CPU spec reads num_cpu_blocks: our
    adapter refuses the release."""
    surface = vllm_release("0.11.0")
    assert "--kv-offloading-size" not in surface.flags
    assert all(vllm_offloading_case("0.11.0", shape) is None for shape in VLLM_OFFLOADING_SHAPES)
