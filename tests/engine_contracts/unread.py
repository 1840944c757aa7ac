"""Injected variables no engine release reads: reported, not failed.

``UNREAD_BY_ENGINES`` is the listing the contract tests find (test_unread.py keeps it
equal): variable -> the engine releases of the pinned sets whose container does not read
it (the engine, the LMCache release it loads, the container's own ``-c`` script, the
interpreter and the container runtime all count as readers). docs/api.md ("What reads
each injected item") mirrors it. Spec-mandated items stay injected unless a release
proves them harmful: the listing is a note, not a verdict.
"""

from __future__ import annotations

from typing import Final

UNREAD_BY_ENGINES: Final[dict[str, tuple[str, ...]]] = {
    # The spec's fail-open switch is the webhook's; no engine reads it.
    "INFERENCECACHE_FAIL_OPEN": (
        "sglang 0.5.13 + lmcache 0.4.7",
        "sglang 0.5.23 + lmcache 0.5.6",
        "vllm 0.11.0 + lmcache 0.4.7",
        "vllm 0.34.0 + lmcache 0.5.6",
    ),
    # The MP worker's marker: the webhook reads it to recognise its own render.
    "INFERENCECACHE_RENDERED_BY": ("lmcache 0.4.7", "lmcache 0.5.6"),
    # Reserved by the spec; neither SGLang nor the LMCache it loads reads it.
    "LMCACHE_USE_EXPERIMENTAL": (
        "sglang 0.5.13 + lmcache 0.4.7",
        "sglang 0.5.23 + lmcache 0.5.6",
    ),
    # Gone from vllm/envs.py since 0.33 (vLLM warns "Unknown vLLM environment variable").
    "VLLM_USE_V1": ("vllm 0.34.0 + lmcache 0.5.6",),
}
