"""The checker can fail: against releases proven not to run the wiring
(``REJECTED`` in shared/engine_versions.py) it reports exactly why, from their source."""

from __future__ import annotations

import pytest

from shared.engine_versions import REJECTED, SAMPLE_TARGETS, SGLANG
from tests.engine_contracts.cases import OWN_IMAGES, cases_of, sample_backends
from tests.engine_contracts.checks import check_pod
from tests.engine_contracts.releases import with_release

pytestmark = pytest.mark.engine_contracts


def failures_against(package: str, version: str) -> list[str]:
    rel = with_release(package, version)
    out: list[str] = []
    for sample, _ in sample_backends():
        for case in cases_of(sample, SAMPLE_TARGETS):
            report = check_pod(
                rel, case.runtime, case.original, case.wired, case.endpoint, OWN_IMAGES
            )
            out += report.failures
    return out


@pytest.mark.parametrize(
    ("package", "version"),
    [(p, v) for p, versions in REJECTED.items() for v in versions],
)
def test_a_rejected_release_fails_the_contract(package: str, version: str) -> None:
    assert failures_against(package, version), (
        f"{package} {version} is listed as REJECTED but the checker accepts every sample on it"
    )


def test_sglang_0_5_3_lacks_the_mp_flag_and_three_hicache_values() -> None:
    """SGLang 0.5.3's server_args.py: no --lmcache-config-file; --hicache-io-backend
    choices lack kernel_ascend; --hicache-mem-layout choices lack page_first_kv_split
    and page_head (all accepted by 0.5.13)."""
    failures = "\n".join(failures_against(SGLANG, "0.5.3"))
    assert (
        "sglang 0.5.3: flag --lmcache-config-file is not a flag of sglang.launch_server" in failures
    )
    for flag, value in (
        ("--hicache-io-backend", "kernel_ascend"),
        ("--hicache-mem-layout", "page_first_kv_split"),
        ("--hicache-mem-layout", "page_head"),
    ):
        assert f"sglang 0.5.3: flag {flag} value {value!r} is not one of its choices" in failures
