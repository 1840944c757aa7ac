"""The KV configuration a vLLM engine pod already carries, read before any wiring.

vLLM reads (``vllm/engine/arg_utils.py``; argparse, the last occurrence winning):

- ``--kv-transfer-config`` (JSON): the KV connector, as ``--flag V`` or ``--flag=V``;
- ``--kv-offloading-size`` (GiB per engine) and ``--kv-offloading-backend``
  (``native`` | ``lmcache``): vLLM's own CPU offloading, which, when the size is set,
  overwrites ``kv_connector`` in ``VllmConfig._post_init_kv_transfer_config``.

The tokens read are the container's ``command``, then ``args``, then
``spec.integration.engineOverrides.args`` (the webhook appends them last), in that order.

``read_kv_config`` is pure: it never raises for what a pod says; an unreadable value is
recorded in ``transfer_error`` for the adapter to fail open with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.runtime_adapters.podspec import cli_tokens, find_flag

KV_TRANSFER_CONFIG: Final = "--kv-transfer-config"
KV_OFFLOADING_SIZE: Final = "--kv-offloading-size"
KV_OFFLOADING_BACKEND: Final = "--kv-offloading-backend"
# MultiConnector's list of sub-connector configs (multi_connector.py).
MULTI_CONNECTOR: Final = "MultiConnector"
MULTI_CONNECTORS_KEY: Final = "connectors"


@dataclass(frozen=True)
class KVConfig:
    """What the pod's own command line says about KV transfer and offloading."""

    # The last --kv-transfer-config, parsed; None when absent or unreadable.
    transfer_config: dict[str, Any] | None = None
    # Why the last --kv-transfer-config could not be read (not JSON, not an object,
    # no value); None when it was read or is absent.
    transfer_error: str | None = None
    # How many --kv-transfer-config occurrences the tokens carry.
    transfer_occurrences: int = 0
    # The last --kv-offloading-size / --kv-offloading-backend value as written.
    offloading_size: str | None = None
    offloading_backend: str | None = None

    @property
    def connector(self) -> str | None:
        """The top-level ``kv_connector`` of the pod's own config."""
        value = (self.transfer_config or {}).get("kv_connector")
        return value if isinstance(value, str) else None

    @property
    def engine_offloading(self) -> bool:
        """Whether vLLM's own offloading is asked for (it overwrites any connector)."""
        return self.offloading_size is not None


def _last_value(tokens: Sequence[str], flag: str) -> tuple[int, str | None, bool]:
    """(occurrences, last value, whether the last occurrence carried a value)."""
    found = find_flag(list(tokens), flag)
    if not found:
        return 0, None, False
    last = found[-1]
    return len(found), last.value, last.value is not None


def parse_transfer_config(value: str) -> tuple[dict[str, Any] | None, str | None]:
    """A ``--kv-transfer-config`` value as a dict, or None and why not."""
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        return None, f"{KV_TRANSFER_CONFIG} is not valid JSON ({exc})"
    if not isinstance(parsed, dict):
        return None, f"{KV_TRANSFER_CONFIG} is JSON but not an object"
    return parsed, None


def read_kv_tokens(tokens: Sequence[str]) -> KVConfig:
    """The KV configuration an argv token list carries."""
    count, value, has_value = _last_value(tokens, KV_TRANSFER_CONFIG)
    config: dict[str, Any] | None = None
    error: str | None = None
    if count and not has_value:
        error = f"{KV_TRANSFER_CONFIG} has no value"
    elif value is not None:
        config, error = parse_transfer_config(value)
    _, size, _ = _last_value(tokens, KV_OFFLOADING_SIZE)
    _, backend, _ = _last_value(tokens, KV_OFFLOADING_BACKEND)
    return KVConfig(config, error, count, size, backend)


def read_kv_config(container: dict[str, Any], override_tokens: Sequence[str] = ()) -> KVConfig:
    """The engine container's own KV configuration: command, args, then the backend's
    engineOverrides.args tokens (appended after them)."""
    return read_kv_tokens([*cli_tokens(container), *override_tokens])


def transfer_config_text(config: dict[str, Any]) -> str:
    """A connector config as the compact JSON we write (key order as given)."""
    return json.dumps(config, separators=(",", ":"))
