"""SGLang native HiCache: --enable-hierarchical-cache and the --hicache-* flags.

Validate first, then mutate: every reserved argument is judged on the *original* pod
before anything is written, so a rejection never leaves partial HiCache wiring.

- an existing argument with the desired value is kept byte for byte, in either the
  ``--flag value`` or ``--flag=value`` form and wherever it is (command or args);
- a different value, the opposite capacity mode (``--hicache-size`` when the backend
  sets ratio, or the reverse), a value flag without a value, a duplicated flag, or
  SGLang's LMCache flags (``--enable-lmcache``, ``--lmcache-config-file``) reject;
- an operator-supplied optional flag the backend does not set is preserved when it is
  well formed;
- each missing canonical argument is appended to ``args`` once.

"Same value" is numeric for ``--hicache-ratio`` (``2`` equals ``2.0``) and
``--hicache-size`` (integers), and exact for the enum-valued flags.

Reserved: only ``--enable-hierarchical-cache`` (spec: each adapter guards "only the
flags/env its own integration cannot function without"; SGLang runs HiCache with its own
defaults for every --hicache-* flag). The --hicache-* flags are adapter-owned and so
amendable through spec.integration.engineOverrides, like LMCACHE_CHUNK_SIZE for vLLM.
A value an override gives one of them is therefore also a "matching" value here (and an
override-given opposite capacity flag is not a conflict): the pod webhook applies the
override after this adapter, so a re-admitted pod carries it, and must converge to an
empty patch instead of failing open.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend, HiCache
from shared.bindings import Binding, Protocol
from shared.jsoncopy import json_copy
from shared.runtime_adapters.base import InjectContext, InjectionRejectedError, RuntimeAdapter
from shared.runtime_adapters.engine import SGLangEngine
from shared.runtime_adapters.kv_config import decline_sglang_decode_without_radix_cache
from shared.runtime_adapters.overrides import entry_groups, override_arg_tokens
from shared.runtime_adapters.podspec import cli_tokens, find_flag, flag_name, runs_shell_script

ENABLE = "--enable-hierarchical-cache"
RATIO = "--hicache-ratio"
SIZE = "--hicache-size"
WRITE_POLICY = "--hicache-write-policy"
IO_BACKEND = "--hicache-io-backend"
MEM_LAYOUT = "--hicache-mem-layout"
VALUE_FLAGS = (RATIO, SIZE, WRITE_POLICY, IO_BACKEND, MEM_LAYOUT)
LMCACHE_FLAGS = ("--enable-lmcache", "--lmcache-config-file")


def desired_args(hi: HiCache) -> list[tuple[str, str | None]]:
    """(flag, value) pairs the backend asks for, in render order (None: boolean flag)."""
    wanted: list[tuple[str, str | None]] = [(ENABLE, None)]
    if hi.ratio is not None:
        wanted.append((RATIO, hi.ratio.strip()))
    if hi.size_gb is not None:
        wanted.append((SIZE, str(hi.size_gb)))
    if hi.write_policy is not None:
        wanted.append((WRITE_POLICY, hi.write_policy))
    if hi.io_backend is not None:
        wanted.append((IO_BACKEND, hi.io_backend))
    if hi.memory_layout is not None:
        wanted.append((MEM_LAYOUT, hi.memory_layout))
    return wanted


def _numeric(value: str) -> Decimal | None:
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def same_value(flag: str, existing: str, desired: str) -> bool:
    if flag in (RATIO, SIZE):
        a, b = _numeric(existing), _numeric(desired)
        return a is not None and a == b
    return existing == desired


def override_values(backend: CacheBackend) -> dict[str, list[str]]:
    """--hicache-* flag -> the values spec.integration.engineOverrides.args gives it."""
    integration = backend.spec.integration
    overrides = integration.engine_overrides if integration else None
    out: dict[str, list[str]] = {}
    for tokens in entry_groups(list(overrides.args or []) if overrides else []):
        flag = flag_name(tokens[0])
        if flag not in VALUE_FLAGS:
            continue
        if "=" in tokens[0]:
            out.setdefault(flag, []).append(tokens[0].split("=", 1)[1])
        elif len(tokens) > 1:
            out.setdefault(flag, []).append(tokens[1])
    return out


def _accepted(flag: str, existing: str, values: list[str]) -> bool:
    return any(same_value(flag, existing, value) for value in values)


def validate_capacity(hi: HiCache) -> None:
    """Exactly one of ratio and sizeGB (admission enforces it; stored objects may predate it)."""
    if (hi.ratio is None) == (hi.size_gb is None):
        raise InjectionRejectedError("spec.hiCache must set exactly one of ratio and sizeGB")
    if hi.ratio is not None:
        ratio = _numeric(hi.ratio)
        if ratio is None or ratio <= 0:
            raise InjectionRejectedError(f"spec.hiCache.ratio {hi.ratio!r} is not a number > 0")


def reject_lmcache_flags(tokens: list[str]) -> None:
    for flag in LMCACHE_FLAGS:
        if find_flag(tokens, flag):
            raise InjectionRejectedError(
                f"the engine already runs SGLang's LMCache integration ({flag}); HiCache and "
                "LMCache are exclusive: roll the workload to switch"
            )


def reject_malformed_or_duplicate(tokens: list[str]) -> None:
    if len(find_flag(tokens, ENABLE)) > 1:
        raise InjectionRejectedError(f"{ENABLE} is given more than once")
    for occ in find_flag(tokens, ENABLE):
        if occ.form == "eq":
            raise InjectionRejectedError(f"{ENABLE} is a boolean flag and takes no value")
    for flag in VALUE_FLAGS:
        found = find_flag(tokens, flag)
        if len(found) > 1:
            raise InjectionRejectedError(f"{flag} is given more than once")
        for occ in found:
            if occ.form == "bare" or not (occ.value or "").strip():
                raise InjectionRejectedError(f"{flag} is given without a value")


def reject_opposite_capacity_mode(
    tokens: list[str], hi: HiCache, overridden: dict[str, list[str]] | None = None
) -> None:
    opposite = SIZE if hi.ratio is not None else RATIO
    allowed = (overridden or {}).get(opposite, [])
    if any(
        not _accepted(opposite, occ.value or "", allowed) for occ in find_flag(tokens, opposite)
    ):
        mode = "ratio" if hi.ratio is not None else "sizeGB"
        raise InjectionRejectedError(
            f"the engine sets {opposite} but the CacheBackend selects capacity by {mode}"
        )


def reject_conflicting_values(
    tokens: list[str],
    wanted: list[tuple[str, str | None]],
    overridden: dict[str, list[str]] | None = None,
) -> None:
    for flag, value in wanted:
        if value is None:
            continue
        accepted = [value, *(overridden or {}).get(flag, [])]
        for occ in find_flag(tokens, flag):
            if not _accepted(flag, occ.value or "", accepted):
                raise InjectionRejectedError(
                    f"the engine sets {flag} {occ.value!r} but the CacheBackend wants {value!r}"
                )


class SGLangHiCacheAdapter(SGLangEngine, RuntimeAdapter):
    name: ClassVar[str] = "SGLang+SGLangHiCache"
    runtime: ClassVar[str] = c.RUNTIME_SGLANG
    cache_type: ClassVar[str] = c.TYPE_SGLANG_HICACHE
    reserved_args: ClassVar[tuple[str, ...]] = ("--enable-hierarchical-cache",)
    reserved_env: ClassVar[tuple[str, ...]] = ()
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset({None})

    def wire(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        hi = backend.spec.hi_cache
        if hi is None:
            raise InjectionRejectedError("type SGLangHiCache requires spec.hiCache")
        role = effective.integration_role(backend.spec)
        if role != c.ROLE_READ_WRITE:
            # reject_unsupported_hicache_role, again, for a backend stored before the
            # rule: never silently treat ReadOnly/WriteOnly as ReadWrite.
            raise InjectionRejectedError(f"SGLang HiCache supports only ReadWrite, not {role}")
        validate_capacity(hi)
        index = self.engine_container_index(pod)
        engine_in = pod["spec"]["containers"][index]
        tokens = cli_tokens(engine_in)
        decline_sglang_decode_without_radix_cache(
            [*tokens, *override_arg_tokens(backend)], "HiCache"
        )
        wanted = desired_args(hi)
        # All judged on the original pod: nothing is written unless everything passes.
        reject_lmcache_flags(tokens)
        reject_malformed_or_duplicate(tokens)
        overridden = override_values(backend)
        reject_opposite_capacity_mode(tokens, hi, overridden)
        reject_conflicting_values(tokens, wanted, overridden)
        missing = [(flag, value) for flag, value in wanted if not find_flag(tokens, flag)]
        if not missing:
            return json_copy(pod)
        if runs_shell_script(engine_in):
            raise InjectionRejectedError(
                f"container {engine_in.get('name')!r} runs a shell script (sh -c); flags "
                "appended to args would not reach SGLang: put the SGLang CLI in command/args"
            )
        out = json_copy(pod)
        engine = out["spec"]["containers"][index]
        args = list(engine.get("args") or [])
        for flag, value in missing:
            args += [flag] if value is None else [flag, value]
        engine["args"] = args
        return out
