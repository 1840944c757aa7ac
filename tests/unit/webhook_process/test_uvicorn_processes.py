"""`icache webhook --workers` defaults to the CPUs the container gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook_svc.http.uvicorn_processes import available_cpus, cgroup_cpu_limit


def _files(
    tmp_path: Path, v2: str | None, quota: str | None, period: str | None
) -> tuple[Path, Path, Path]:
    paths = tmp_path / "cpu.max", tmp_path / "quota", tmp_path / "period"
    for path, text in zip(paths, (v2, quota, period), strict=True):
        if text is not None:
            path.write_text(text)
    return paths


@pytest.mark.parametrize(
    ("v2", "quota", "period", "expected"),
    [
        ("max 100000\n", None, None, None),  # cgroup v2, no limit
        ("150000 100000\n", None, None, 1.5),  # cgroup v2, 1.5 CPUs
        (None, "200000\n", "100000\n", 2.0),  # cgroup v1 CFS quota
        (None, "-1\n", "100000\n", None),  # cgroup v1, no limit
        (None, None, None, None),  # no cgroup files at all
        ("garbage", None, None, None),
    ],
)
def test_cgroup_cpu_limit(
    tmp_path: Path, v2: str | None, quota: str | None, period: str | None, expected: float | None
) -> None:
    assert cgroup_cpu_limit(*_files(tmp_path, v2, quota, period)) == expected


@pytest.mark.parametrize(
    ("limit", "affinity", "expected"),
    [
        (None, 8, 8),  # no limit: the CPU set
        (1.5, 8, 2),  # a fractional limit rounds up
        (0.1, 8, 1),  # never zero
        (16.0, 4, 4),  # a limit above the CPU set does not add CPUs
        (1.0, 1, 1),
    ],
)
def test_available_cpus(limit: float | None, affinity: int, expected: int) -> None:
    assert available_cpus(affinity, lambda: limit) == expected
