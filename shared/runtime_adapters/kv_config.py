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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared import constants as c
from shared.api.models import CacheBackend
from shared.runtime_adapters.base import InjectionDeclinedError
from shared.runtime_adapters.overrides import override_arg_tokens
from shared.runtime_adapters.podspec import cli_tokens, find_flag, remove_flag_tokens
from shared.runtime_adapters.vllm_release import connector_registered, release_text

KV_TRANSFER_CONFIG: Final = "--kv-transfer-config"
KV_OFFLOADING_SIZE: Final = "--kv-offloading-size"
KV_OFFLOADING_BACKEND: Final = "--kv-offloading-backend"
# The flags every vLLM adapter reserves: the connector, and vLLM's own offloading,
# which overwrites the connector.
VLLM_KV_FLAGS: Final = (KV_TRANSFER_CONFIG, KV_OFFLOADING_SIZE, KV_OFFLOADING_BACKEND)
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


# Top-level keys of a MultiConnector config that vLLM reads from the top level only,
# lifted from the pod's own connector config when it is wrapped:
# - ``kv_role``: at 0.11.0 and 0.33.0 ``KVTransferConfig.is_kv_producer`` /
#   ``is_kv_consumer`` read the top-level role (the scheduler defers block frees for a
#   consumer, finalises partial offloads for a producer; the multimodal config follows
#   the consumer role); from 0.34.0 they read the children's roles, and the top-level
#   role must still be set whenever ``kv_connector`` is. The pod's role keeps the
#   engine's prefill/decode behaviour what it was at every pin.
# - ``kv_load_failure_policy``: the scheduler reads the top-level value only.
# - ``engine_id``: MultiConnector builds each child as
#   ``KVTransferConfig(**entry, engine_id=...)``, so an entry that carries its own
#   ``engine_id`` fails with a duplicate keyword; the child inherits the top-level one,
#   which the engine core also suffixes per data-parallel rank.
LIFTED_KEYS: Final = ("kv_role", "kv_load_failure_policy", "engine_id")
# Keys of an entry that MultiConnector cannot take from the entry itself.
ENTRY_DROPPED_KEYS: Final = ("engine_id",)


class TransferConfigError(ValueError):
    """A pod's connector config that cannot be composed with ours (the adapter fails
    open with the message)."""


def multi_connector_entries(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The connector configs a MultiConnector config lists, in order; raises
    TransferConfigError when the list is not a list of objects."""
    extra = config.get("kv_connector_extra_config")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise TransferConfigError(
            f"{KV_TRANSFER_CONFIG}: {MULTI_CONNECTOR}'s kv_connector_extra_config is not an object"
        )
    entries = extra.get(MULTI_CONNECTORS_KEY, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise TransferConfigError(
            f"{KV_TRANSFER_CONFIG}: {MULTI_CONNECTOR}'s kv_connector_extra_config."
            f"{MULTI_CONNECTORS_KEY} is not a list of connector objects"
        )
    return list(entries)


def _with_entries(config: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``config`` with its MultiConnector list replaced, every other key as it was."""
    extra = dict(config.get("kv_connector_extra_config") or {})
    extra[MULTI_CONNECTORS_KEY] = entries
    return {**config, "kv_connector_extra_config": extra}


def _converge_entries(
    entries: list[dict[str, Any]],
    ours: dict[str, Any],
    is_ours: Callable[[dict[str, Any]], bool],
) -> list[dict[str, Any]]:
    """Ours in place of the first entry that is ours (appended when none is); later
    entries of ours dropped, so the list carries exactly one."""
    out: list[dict[str, Any]] = []
    placed = False
    for entry in entries:
        if not is_ours(entry):
            out.append(entry)
        elif not placed:
            out.append(dict(ours))
            placed = True
    if not placed:
        out.append(dict(ours))
    return out


def _wrap(pod_config: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """A MultiConnector with the pod's connector first, ours after it; the keys vLLM
    reads from the top level only (``LIFTED_KEYS``) lifted from the pod's config."""
    top: dict[str, Any] = {"kv_connector": MULTI_CONNECTOR}
    for key in LIFTED_KEYS:
        if key in pod_config:
            top[key] = pod_config[key]
    top.setdefault("kv_role", ours.get("kv_role"))
    entry = {k: v for k, v in pod_config.items() if k not in ENTRY_DROPPED_KEYS}
    top["kv_connector_extra_config"] = {MULTI_CONNECTORS_KEY: [entry, dict(ours)]}
    return top


def compose_transfer_config(
    pod_config: dict[str, Any] | None,
    ours: dict[str, Any],
    *,
    is_ours: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:
    """The one ``--kv-transfer-config`` that runs the pod's own connector and ours.

    - no config of the pod's, or one naming no ``kv_connector`` (vLLM runs none): ours;
    - the pod's connector is ours: ours (converge);
    - a ``MultiConnector``: its list with ours appended, or in place of the entry that
      is ours (one kept); every other entry and key unchanged;
    - any other connector: a ``MultiConnector`` listing the pod's config first (every
      key but ``engine_id``, which MultiConnector only takes from the top level) and
      ours after it, with the top-level keys of ``LIFTED_KEYS`` from the pod's config.

    MultiConnector loads from the first entry that has the tokens and saves to all, so
    the pod's connector (a prefill/decode transfer) is asked first. Idempotent:
    composing a composed config returns it unchanged. Raises TransferConfigError for a
    MultiConnector whose list is malformed.
    """
    if pod_config is None or not pod_config.get("kv_connector") or is_ours(pod_config):
        return dict(ours)
    if pod_config.get("kv_connector") == MULTI_CONNECTOR:
        entries = multi_connector_entries(pod_config)
        return _with_entries(pod_config, _converge_entries(entries, ours, is_ours))
    return _wrap(pod_config, ours)


def unregistered_connectors(
    config: dict[str, Any], release: tuple[int, int, int] | None
) -> list[str]:
    """The connectors of a pod's config (top-level and MultiConnector entries) that the
    vLLM release does not register and no ``kv_connector_module_path`` loads."""
    configs = [config]
    if config.get("kv_connector") == MULTI_CONNECTOR:
        configs += multi_connector_entries(config)
    missing: list[str] = []
    for entry in configs:
        name = entry.get("kv_connector")
        if entry.get("kv_connector_module_path") or not isinstance(name, str):
            continue
        if connector_registered(name, release) is False:
            missing.append(name)
    return missing


# vLLM 0.11.1 added --kv-offloading-size / --kv-offloading-backend and the overwrite.
ENGINE_OFFLOADING_SINCE: Final[tuple[int, int, int]] = (0, 11, 1)
# What VllmConfig._post_init_kv_transfer_config sets kv_connector to, per backend.
ENGINE_OFFLOADING_CONNECTOR: Final[dict[str, str]] = {
    "native": "OffloadingConnector",
    "lmcache": "LMCacheMPConnector",
}
# The pod's values as quoted in the admission warning, which must stay within the API
# server's 256 characters whatever the pod says.
WARNING_VALUE_CHARS: Final = 16


def _clip(value: str) -> str:
    return value if len(value) <= WARNING_VALUE_CHARS else value[: WARNING_VALUE_CHARS - 1] + "…"


def engine_offloading_declined(
    kv: KVConfig, release: tuple[int, int, int] | None, cache: str
) -> None:
    """Rule "the engine's own offloading wins": a pod with ``--kv-offloading-size`` is
    admitted with its flags untouched and not wired, since vLLM would overwrite the
    connector we inject (``VllmConfig._post_init_kv_transfer_config``); ``cache`` names
    what we would have wired (it "never runs"). Raises
    InjectionDeclinedError with the reason, an admission warning naming the flag, and
    the EngineOffloadingConflict record for the worker."""
    if not kv.engine_offloading:
        return
    backend = kv.offloading_backend or "native"
    flag = f"{KV_OFFLOADING_SIZE} {_clip(str(kv.offloading_size))}"
    if release is not None and release < ENGINE_OFFLOADING_SINCE:
        effect = (
            f"vLLM {release_text(release)} has no such flag and refuses it (from "
            f"{release_text(ENGINE_OFFLOADING_SINCE)} it overwrites the KV connector)"
        )
    else:
        replacement = ENGINE_OFFLOADING_CONNECTOR.get(backend, "its offloading connector")
        if backend == "lmcache":
            replacement += " at tcp://localhost:5555"
        effect = f"vLLM overwrites the KV connector with {replacement}: {cache} never runs"
    warning = (
        f"{flag} (backend {_clip(backend)}): {effect}; admitted unwired, flags untouched "
        f"({c.REASON_ENGINE_OFFLOADING_CONFLICT}). Drop the flag to use the CacheBackend"
    )
    raise InjectionDeclinedError(
        f"{c.REASON_ENGINE_OFFLOADING_CONFLICT}: the engine's own KV offloading wins: {flag} "
        f"({KV_OFFLOADING_BACKEND} {_clip(backend)}): {effect}; the pod is admitted unwired "
        "with its flags untouched",
        c.WIRING_REASON_ENGINE_OFFLOADING,
        declined=c.REASON_ENGINE_OFFLOADING_CONFLICT,
        warnings=(warning,),
    )


def kv_override_tokens(backend: CacheBackend) -> list[str]:
    """engineOverrides.args tokens as the engine gets them: the KV flags every vLLM
    adapter reserves (which the overrides merge skips and validation rejects) left out."""
    tokens = override_arg_tokens(backend)
    for flag in VLLM_KV_FLAGS:
        tokens = remove_flag_tokens(tokens, flag)
    return tokens


def composed_pod_transfer_config(
    kv: KVConfig,
    release: tuple[int, int, int] | None,
    ours: dict[str, Any],
    *,
    is_ours: Callable[[dict[str, Any]], bool],
) -> str:
    """The one ``--kv-transfer-config`` the engine runs: the pod's own connector config
    ``kv`` composed with ``ours`` (``compose_transfer_config``). Raises
    InjectionDeclinedError (fail open, the pod's arguments untouched) when the pod's
    config cannot be read or names a connector its vLLM release does not register."""
    if kv.transfer_error:
        raise InjectionDeclinedError(
            f"{kv.transfer_error}; the pod is left unwired so vLLM reads its config as written",
            c.WIRING_REASON_KV_CONFIG_INVALID,
        )
    try:
        missing = unregistered_connectors(kv.transfer_config or {}, release)
        composed = compose_transfer_config(kv.transfer_config, ours, is_ours=is_ours)
    except TransferConfigError as exc:
        raise InjectionDeclinedError(
            f"{exc}; the pod is left unwired", c.WIRING_REASON_KV_CONFIG_INVALID
        ) from exc
    if missing:
        at = f"vLLM {release_text(release)}" if release else "the newest vLLM"
        raise InjectionDeclinedError(
            f"{KV_TRANSFER_CONFIG} names {', '.join(missing)}, which {at} does not register "
            "(and no kv_connector_module_path loads it); the pod is left unwired",
            c.WIRING_REASON_KV_CONNECTOR_UNREGISTERED,
        )
    return transfer_config_text(composed)


# SGLang prefill/decode disaggregation (``server_args.py`` at 0.5.13,
# ``arg_groups/fields/disagg.py`` and ``arg_groups/pd_disaggregation_hook.py`` at 0.5.23).
SGLANG_DISAGGREGATION_MODE: Final = "--disaggregation-mode"
SGLANG_DISAGGREGATION_BACKEND: Final = "--disaggregation-transfer-backend"
SGLANG_DECODE_RADIX_CACHE: Final = "--disaggregation-decode-enable-radix-cache"
SGLANG_DECODE: Final = "decode"


@dataclass(frozen=True)
class SGLangDisaggregation:
    """The prefill/decode role an SGLang engine's command line gives it."""

    mode: str  # "null" (not disaggregated), "prefill" or "decode"
    transfer_backend: str | None  # as written; SGLang's default is mooncake
    decode_radix_cache: bool

    @property
    def decode_without_radix_cache(self) -> bool:
        """SGLang forces a decode server's radix cache off unless
        ``--disaggregation-decode-enable-radix-cache``: LMCache's and HiCache's trees
        then never run (HiCache is refused outright)."""
        return self.mode == SGLANG_DECODE and not self.decode_radix_cache


def read_sglang_disaggregation(tokens: Sequence[str]) -> SGLangDisaggregation:
    """The last ``--disaggregation-mode`` / ``--disaggregation-transfer-backend`` and
    whether the decode radix cache is on (a store_true flag at both pinned releases)."""
    _, mode, _ = _last_value(tokens, SGLANG_DISAGGREGATION_MODE)
    _, backend, _ = _last_value(tokens, SGLANG_DISAGGREGATION_BACKEND)
    radix = SGLANG_DECODE_RADIX_CACHE in tokens
    return SGLangDisaggregation(mode or "null", backend, radix)


def sglang_disaggregation_message(role: SGLangDisaggregation, cache: str) -> str | None:
    """Why ``cache`` (LMCache, HiCache) cannot run beside the pod's disaggregated role,
    or None where it can (not disaggregated, a prefill server, a decode server with its
    radix cache enabled)."""
    if not role.decode_without_radix_cache:
        return None
    return (
        f"the pod is an SGLang decode server ({SGLANG_DISAGGREGATION_MODE} decode, transfer "
        f"backend {role.transfer_backend or 'mooncake'}) without "
        f"{SGLANG_DECODE_RADIX_CACHE}: SGLang forces its radix cache off, so {cache} would "
        "not run; the pod is left unwired with its flags untouched (add "
        f"{SGLANG_DECODE_RADIX_CACHE} to cache on the decode side)"
    )


def decline_sglang_decode_without_radix_cache(tokens: Sequence[str], cache: str) -> None:
    """Rule: an SGLang decode server without a radix cache is not wired (fail open,
    ``disaggregated_decode_no_radix_cache``); any other role keeps its flags and is."""
    message = sglang_disaggregation_message(read_sglang_disaggregation(tokens), cache)
    if message is not None:
        raise InjectionDeclinedError(message, c.WIRING_REASON_DISAGGREGATED_DECODE)
