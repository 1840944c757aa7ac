"""Every injected item of every sample backend, CRD enum value and Pod example, checked
against the published source of both pinned engine sets (shared/engine_versions.py).

A failure names the item, the release and why. Variables no reader reads are collected
for the report (test_unread.py), not failed.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine_contracts.cases import (
    OWN_IMAGES,
    cases_of,
    crd_enums,
    example_case,
    example_pods,
    sample_backends,
)
from tests.engine_contracts.checks import check_engine_command, check_pod
from tests.engine_contracts.releases import SETS, releases

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
    least one sample variant the webhook wires (so the checks above saw it)."""
    seen: set[tuple[tuple[str, ...], str]] = set()
    for sample, _ in sample_backends():
        for case in cases_of(sample, SETS["samples"]):
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
