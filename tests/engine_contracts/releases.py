"""The two pinned sets' surfaces, read once per test session from the cache."""

from __future__ import annotations

from functools import cache
from typing import Final

from shared.engine_versions import LMCACHE, NEWEST, SAMPLE_TARGETS, SGLANG, VLLM, ReleaseSet
from tests.engine_contracts.cache import MANIFEST, SOURCES, require_release
from tests.engine_contracts.checks import Releases
from tests.engine_contracts.surfaces import VllmSurface, read_lmcache, read_sglang, read_vllm

SETS: Final[dict[str, ReleaseSet]] = {"samples": SAMPLE_TARGETS, "newest": NEWEST}


@cache
def releases(name: str) -> Releases:
    """The surfaces of pinned set ``name`` ("samples" or "newest"); fails naming
    ``make engine-sources`` when a release is not in the cache."""
    return read_set(name, SETS[name])


@cache
def with_release(package: str, version: str) -> Releases:
    """The sample-target set with ``package`` moved to ``version`` (a rejected release)."""
    pinned = SAMPLE_TARGETS
    moved = ReleaseSet(
        vllm=version if package == VLLM else pinned.vllm,
        sglang=version if package == SGLANG else pinned.sglang,
        lmcache=version if package == LMCACHE else pinned.lmcache,
    )
    return read_set(f"{package} {version} (rejected)", moved)


def read_set(name: str, pinned: ReleaseSet) -> Releases:
    vllm = require_release(VLLM, pinned.vllm)
    sglang = require_release(SGLANG, pinned.sglang)
    lmcache = require_release(LMCACHE, pinned.lmcache)
    return Releases(
        name=f"{name} (vllm {pinned.vllm}, sglang {pinned.sglang}, lmcache {pinned.lmcache})",
        vllm=read_vllm(vllm / SOURCES, pinned.vllm),
        sglang=read_sglang(sglang / SOURCES, pinned.sglang),
        lmcache=read_lmcache(
            lmcache / SOURCES, pinned.lmcache, (lmcache / MANIFEST).read_text().split()
        ),
    )


@cache
def vllm_release(version: str) -> VllmSurface:
    """One vLLM release's surface, pinned or not (the KV connector table's releases)."""
    return read_vllm(require_release(VLLM, version) / SOURCES, version)
