"""The engine releases the wiring is proved against, and the minimum each wiring needs.

Two pinned sets, read by the engine-contract tests (tests/engine_contracts/) from the
releases' published source:

- ``SAMPLE_TARGETS``: the vLLM, SGLang and LMCache releases the samples, examples and
  benchmarks name (image tags ``vllm/vllm-openai:v<vllm>``, ``lmsysorg/sglang:v<sglang>``,
  ``lmcache/standalone:v<lmcache>``);
- ``NEWEST``: the newest releases the tests were last moved to.

``MINIMUM`` is, per (runtime, cache type, provider), the oldest release of each package
the contract tests prove the injected wiring against; the worker warns when an engine
reports an older one. docs/api.md ("Engine versions") prints the same table, and a test
keeps the two equal. docs/testing.md says how to move the pins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from shared import constants as c

VLLM: Final = "vllm"
SGLANG: Final = "sglang"
LMCACHE: Final = "lmcache"
PACKAGES: Final = (VLLM, SGLANG, LMCACHE)


@dataclass(frozen=True)
class ReleaseSet:
    """One release of each engine package."""

    vllm: str
    sglang: str
    lmcache: str

    def of(self, package: str) -> str:
        return {VLLM: self.vllm, SGLANG: self.sglang, LMCACHE: self.lmcache}[package]


SAMPLE_TARGETS: Final = ReleaseSet(vllm="0.11.0", sglang="0.5.13", lmcache="0.4.7")
NEWEST: Final = ReleaseSet(vllm="0.34.0", sglang="0.5.23", lmcache="0.5.6")

# Releases proven NOT to run the wiring. The contract tests check that the checker still
# rejects them, so a checker that accepts everything cannot pass unnoticed. SGLang 0.5.3:
# no --lmcache-config-file, and argparse refuses hiCache ioBackend kernel_ascend and
# memoryLayout page_first_kv_split / page_head.
REJECTED: Final[dict[str, tuple[str, ...]]] = {SGLANG: ("0.5.3",)}

# Provider None: host-only (no remote tier) or any provider the pair accepts.
WiringKey = tuple[str, str, str | None]

MINIMUM: Final[dict[WiringKey, dict[str, str]]] = {
    (c.RUNTIME_VLLM, c.TYPE_LMCACHE, None): {VLLM: "0.11.0", LMCACHE: "0.4.7"},
    (c.RUNTIME_VLLM, c.TYPE_LMCACHE, c.PROVIDER_LMCACHE_SERVER): {
        VLLM: "0.11.0",
        LMCACHE: "0.4.7",
    },
    # LMCache reads the Mooncake setup from LMCACHE_EXTRA_CONFIG, not from the URL.
    (c.RUNTIME_VLLM, c.TYPE_LMCACHE, c.PROVIDER_MOONCAKE): {VLLM: "0.11.0", LMCACHE: "0.4.7"},
    # 0.5.13: the first SGLang whose CLI has --lmcache-config-file (MP mode).
    (c.RUNTIME_SGLANG, c.TYPE_LMCACHE, None): {SGLANG: "0.5.13", LMCACHE: "0.4.7"},
    (c.RUNTIME_SGLANG, c.TYPE_LMCACHE, c.PROVIDER_REDIS): {SGLANG: "0.5.13", LMCACHE: "0.4.7"},
    # 0.5.13: the first SGLang whose argparse accepts every hiCache enum value the CRD allows.
    (c.RUNTIME_SGLANG, c.TYPE_SGLANG_HICACHE, None): {SGLANG: "0.5.13"},
    # 0.33.0: the first vLLM whose OffloadingConnector keeps its CPU tier in the
    # /dev/shm region (cpu/shared_offload_region.py) sized by cpu_bytes_to_use.
    (c.RUNTIME_VLLM, c.TYPE_VLLM_OFFLOADING, None): {VLLM: "0.33.0"},
}


# Releases the contract tests also read, beyond the two pinned sets: vLLM 0.33.0, the
# first whose OffloadingConnector keeps its CPU tier in the /dev/shm region (the
# VLLMOffloading minimum; tests/engine_contracts/cases.py wires it there).
ALSO_PROVEN: Final[dict[str, tuple[str, ...]]] = {VLLM: ("0.33.0",)}

# Wirings whose samples name a newer release than SAMPLE_TARGETS, because the wiring
# needs it: vLLM's own offloading is refused below 0.33.0, so its sample names NEWEST.
SAMPLE_TARGET_OVERRIDES: Final[dict[WiringKey, dict[str, str]]] = {
    (c.RUNTIME_VLLM, c.TYPE_VLLM_OFFLOADING, None): {VLLM: NEWEST.vllm},
}


def minimum_for(runtime: str, cache_type: str, provider: str | None) -> dict[str, str]:
    """The minimum releases for a wiring; a provider without its own row uses the pair's."""
    return dict(
        MINIMUM.get((runtime, cache_type, provider))
        or MINIMUM.get((runtime, cache_type, None))
        or {}
    )


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``0.4.7`` / ``v0.5.6`` / ``0.5.3.post1`` / ``0.11.0+cu126`` -> (0, 4, 7) ...; None when
    the text does not start with a dotted number."""
    head = text.strip().lstrip("vV").split("+", 1)[0]
    parts: list[int] = []
    for piece in head.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts) if parts else None


def older_than(version: str, minimum: str) -> bool | None:
    """True when ``version`` is older than ``minimum``; None when either does not parse."""
    a, b = version_tuple(version), version_tuple(minimum)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) < b + (0,) * (width - len(b))
