"""Spec rule "spec.integration.engineOverrides cannot touch reserved args/env", and LMCACHE_EXTRA_CONFIG must be a JSON object."""

from __future__ import annotations

import json
from typing import Final

from shared import constants as c
from shared.api import effective
from shared.runtime_adapters import registry
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    FieldError,
    FieldPath,
    forbidden,
    invalid,
)
from shared.validation.vocabulary import OVERRIDES, is_mooncake

# ---------------------------------------------------------- engine overrides


def leading_flag(arg: str) -> str:
    """The leading flag token: "--kv-transfer-config={...}" and "--kv-transfer-config x"
    both give "--kv-transfer-config"."""
    stripped = arg.strip()
    token = stripped.split(None, 1)[0] if stripped else ""
    return token.split("=", 1)[0]


def reject_reserved_engine_overrides(ctx: RuleContext) -> list[FieldError]:
    """Spec "Reserved declarations and admission hard-reject": engineOverrides.{args,
    suppressArgs} vs ReservedArgs() and {env, suppressEnv} vs ReservedEnv() of the
    selected adapter; the error names the flag/env and the adapter."""
    spec = ctx.parsed
    overrides = spec.integration.engine_overrides if spec.integration else None
    adapter = registry.select_adapter(spec.runtime, effective.cache_type(spec))
    if overrides is None or adapter is None:
        return []
    errors = []

    def reserved(path: FieldPath, what: str, name: str, verb: str) -> FieldError:
        return forbidden(
            path,
            f"{what} {name} is reserved by the {adapter.name} adapter: the cache integration "
            f"cannot function without it, so it cannot be {verb} (to skip injection on a pod "
            f"use the {c.ANNOTATION_SKIP_INJECT} annotation)",
        )

    for i, arg in enumerate(overrides.args or []):
        flag = leading_flag(arg)
        if flag in adapter.reserved_args:
            errors.append(reserved(OVERRIDES.child("args").item(i), "flag", flag, "overridden"))
    for i, arg in enumerate(overrides.suppress_args or []):
        flag = leading_flag(arg)
        if flag in adapter.reserved_args:
            path = OVERRIDES.child("suppressArgs").item(i)
            errors.append(reserved(path, "flag", flag, "suppressed"))
    for i, env in enumerate(overrides.env or []):
        if env.name in adapter.reserved_env:
            path = OVERRIDES.child("env").item(i).child("name")
            errors.append(reserved(path, "env", env.name, "overridden"))
    for i, name in enumerate(overrides.suppress_env or []):
        if name in adapter.reserved_env:
            path = OVERRIDES.child("suppressEnv").item(i)
            errors.append(reserved(path, "env", name, "suppressed"))
    return errors


LMCACHE_EXTRA_CONFIG: Final = "LMCACHE_EXTRA_CONFIG"


def extra_config_error(value: str) -> str | None:
    """Why an LMCACHE_EXTRA_CONFIG value is not a JSON object; None when it is one or is
    empty (LMCache reads an empty value as unset)."""
    if not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if isinstance(parsed, dict):
        return None
    kind = {list: "array", str: "string", bool: "boolean"}.get(type(parsed), "scalar")
    return f"a JSON {kind}, not an object"


def reject_non_object_lmcache_extra_config(ctx: RuleContext) -> list[FieldError]:
    """An engineOverrides.env ``LMCACHE_EXTRA_CONFIG`` must be a JSON object: LMCache
    parses it with json.loads into its extra_config dict, and for a Mooncake binding the
    Pod webhook merges the master address into it (so there it must be a literal value,
    not valueFrom). Reported at the entry's value."""
    spec = ctx.parsed
    overrides = spec.integration.engine_overrides if spec.integration else None
    if overrides is None or effective.cache_type(spec) != c.TYPE_LMCACHE:
        return []
    merged_by_webhook = spec.runtime == c.RUNTIME_VLLM and is_mooncake(spec)
    errors = []
    for i, env in enumerate(overrides.env or []):
        if env.name != LMCACHE_EXTRA_CONFIG:
            continue
        path = OVERRIDES.child("env").item(i)
        if env.value is None and env.value_from is not None and merged_by_webhook:
            errors.append(
                invalid(
                    path.child("valueFrom"),
                    "",
                    "must be a literal JSON object value: the Pod webhook merges the Mooncake "
                    "master address into it",
                )
            )
            continue
        problem = extra_config_error(env.value or "")
        if problem:
            errors.append(
                invalid(
                    path.child("value"),
                    env.value,
                    f"{problem}: LMCache reads {LMCACHE_EXTRA_CONFIG} as a JSON object of "
                    'extra_config keys, e.g. {"protocol":"rdma","device_name":"mlx5_0"}',
                )
            )
    return errors
