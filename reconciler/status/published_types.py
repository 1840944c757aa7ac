"""Which condition types each mode publishes (the spec's Conditions: the set depends on
the integration mode and type), and which advisory types survive in it.
"""

from __future__ import annotations

from typing import Final

from shared import constants as c
from shared.backend_mode import Mode

# Condition types each mode may carry. Types a mode publishes itself are computed;
# the remainder of the set are advisory conditions written by other loops that
# survive in that mode; everything else is removed on entering the mode.
ALLOWED_TYPES: Final[dict[Mode, frozenset[str]]] = {
    Mode.MANAGED: frozenset(
        {
            c.COND_READY,
            c.COND_DEGRADED,
            c.COND_PROGRESSING,
            c.COND_FUNCTIONAL_PROBE_OK,
            c.COND_ENGINE_KERNELS_HEALTHY,
            c.COND_T2_DEGRADED,
            c.COND_ENGINE_COMPATIBILITY,
            c.COND_ENGINE_VERSION_BELOW_MINIMUM,
            c.COND_LMCACHE_VERSION_SKEW,
            c.COND_ENGINE_HOST_MEMORY,
            c.COND_ENGINE_OFFLOADING,
        }
    ),
    Mode.HOST_ONLY: frozenset(
        {
            c.COND_READY,
            c.COND_DEGRADED,
            c.COND_PROGRESSING,
            c.COND_ENGINE_KERNELS_HEALTHY,
            c.COND_ENGINE_COMPATIBILITY,
            c.COND_ENGINE_VERSION_BELOW_MINIMUM,
            c.COND_ENGINE_HOST_MEMORY,
            c.COND_ENGINE_OFFLOADING,
        }
    ),
    Mode.EVENTS_ONLY: frozenset({c.COND_READY, c.COND_DEGRADED, c.COND_PROGRESSING}),
    Mode.EXTERNAL: frozenset({c.COND_READY, c.COND_PROGRESSING}),
    Mode.HICACHE: frozenset({c.COND_PROGRESSING}),
    Mode.UNSUPPORTED: frozenset({c.COND_READY, c.COND_PROGRESSING}),
}

# Modes where the KV-event readiness gate runs (External is always exempt).
GATED_MODES: Final = frozenset({Mode.MANAGED, Mode.HOST_ONLY, Mode.EVENTS_ONLY})
# Modes with an injected KV connector on the engine: the engine-side advisory
# conditions (EngineKernelsHealthy, EngineCompatibility) apply.
ENGINE_ADVISORY_MODES: Final = frozenset({Mode.MANAGED, Mode.HOST_ONLY})
ADVISORY_TYPES: Final = frozenset(
    {
        c.COND_FUNCTIONAL_PROBE_OK,
        c.COND_T2_DEGRADED,
        c.COND_ENGINE_KERNELS_HEALTHY,
        c.COND_ENGINE_COMPATIBILITY,
        c.COND_ENGINE_VERSION_BELOW_MINIMUM,
        c.COND_LMCACHE_VERSION_SKEW,
        c.COND_ENGINE_HOST_MEMORY,
        c.COND_ENGINE_OFFLOADING,
    }
)
