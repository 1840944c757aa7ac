"""spec.integration.engineOverrides: amend the adapter-injected engine args/env.

The adapter-owned set is the diff of the engine container immediately before and after
the adapter ran: a flag or env name the adapter added, changed or removed. The CR may
amend only that set; entries of the user's pod template the adapter did not touch are
protected, so a CacheBackend cannot silently rewrite the engine owner's template.

- ``args``: an entry whose leading flag matches an adapter-owned flag replaces it (in
  place); an entry whose flag is in neither the adapter-owned set nor the user template
  is appended; an entry colliding with an untouched user-template flag is a silent
  no-op. Entries are applied in order.
- ``suppressArgs``: the adapter must not inject these: a flag it added is removed, a
  template flag it modified gets the template's own value back; anything else
  (user-template flags it did not touch) is a no-op.
- ``env``: adapter-owned names are upserted, new names appended, user-owned names left;
  a name the adapter merges itself (``merged_env``: the operator's value is already
  merged into the injected one) is left as the adapter rendered it.
- ``suppressEnv``: as suppressArgs, by env name; user-owned env is protected.

Reserved args/env (the adapter's ReservedArgs/ReservedEnv) are never amended: the
validating webhook rejects such overrides, and a CacheBackend stored before that rule
keeps its canonical wiring here instead of being un-wired.

Re-admission. On an already wired pod the "before" container already carries the
override result. The adapter's canonical re-injection then changes each overridden
adapter-owned value back (so it is adapter-owned again and the override re-applies),
re-adds each suppressed entry (removed again), and leaves an appended entry alone (it
now reads as the template's own and stays, with the value the override gave it). The
result is the same pod, so a re-admitted pod yields an empty patch.

An args entry is tokenised like a shell word pair: ``--flag=value`` stays one token,
``--flag value`` becomes two (the value keeps its inner spaces), ``--flag`` is bare. An
entry that does not start with ``--`` continues the entry before it (its value), so
``["--max-model-len", "4096"]`` is the same override as ``["--max-model-len 4096"]``.
"""

from __future__ import annotations

from typing import Any

from shared.api.models import CacheBackend, EngineOverrides
from shared.runtime_adapters.podspec import (
    env_map,
    find_flag,
    flag_name,
    flags_in,
    remove_arg,
    remove_env,
    upsert_env_var,
)


def entry_tokens(entry: str) -> list[str]:
    """An ``engineOverrides.args`` entry as argv tokens."""
    text = entry.strip()
    if not text:
        return []
    head, _, rest = text.partition(" ")
    if "=" in head or not rest.strip():
        return [text] if "=" in head else [head]
    return [head, rest.strip()]


def override_arg_tokens(backend: CacheBackend) -> list[str]:
    """spec.integration.engineOverrides.args as argv tokens (appended after the
    engine's own arguments)."""
    integration = backend.spec.integration
    overrides = integration.engine_overrides if integration else None
    tokens: list[str] = []
    for entry in (overrides.args if overrides else None) or []:
        tokens += entry_tokens(entry)
    return tokens


def adapter_owned_args(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Flags whose occurrences (values) differ between the two containers' command lines."""
    a = flags_in([*(before.get("command") or [])[1:], *(before.get("args") or [])])
    b = flags_in([*(after.get("command") or [])[1:], *(after.get("args") or [])])
    return {flag for flag in a.keys() | b.keys() if a.get(flag) != b.get(flag)}


def adapter_owned_env(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    a, b = env_map(before), env_map(after)
    return {name for name in a.keys() | b.keys() if a.get(name) != b.get(name)}


def _replace_flag(container: dict[str, Any], flag: str, tokens: list[str]) -> bool:
    """Replace the first occurrence of ``flag`` (args, else command) with ``tokens``,
    dropping any later ones; False when the flag is absent."""
    for field, offset in (("args", 0), ("command", 1)):
        seq = list(container.get(field) or [])
        found = find_flag(seq[offset:], flag)
        if not found:
            continue
        for occ in reversed(found[1:]):
            del seq[offset + occ.index : offset + occ.index + occ.width]
        first = found[0]
        seq[offset + first.index : offset + first.index + first.width] = tokens
        container[field] = seq
        return True
    return False


def entry_groups(entries: list[str]) -> list[list[str]]:
    """``engineOverrides.args`` as argv token groups, one per leading flag.

    An entry that does not start a flag continues the group before it, so the list
    form ``["--max-model-len", "4096"]`` and the one-entry forms ``"--max-model-len
    4096"`` / ``"--max-model-len=4096"`` mean the same thing (a value is never dropped).
    """
    groups: list[list[str]] = []
    for entry in entries:
        tokens = entry_tokens(entry)
        if not tokens:
            continue
        if groups and flag_name(tokens[0]) is None:
            groups[-1] = [*groups[-1], *tokens]
        else:
            groups.append(tokens)
    return groups


def apply_args(
    container: dict[str, Any],
    entries: list[str],
    owned: set[str],
    user: set[str],
    reserved: set[str],
) -> None:
    appended: set[str] = set()
    for tokens in entry_groups(entries):
        flag = flag_name(tokens[0])
        if flag is not None and flag in reserved:
            continue
        if flag is not None and (flag in owned or flag in appended):
            # A later entry of an appended flag amends it instead of appending twice.
            if not _replace_flag(container, flag, tokens):
                container["args"] = [*(container.get("args") or []), *tokens]
        elif flag is not None and flag in user:
            continue  # the engine owner's own flag: protected
        else:
            container["args"] = [*(container.get("args") or []), *tokens]
            if flag is not None:
                appended.add(flag)


def _occurrence_tokens(container: dict[str, Any], flag: str) -> list[str]:
    """The tokens of every occurrence of ``flag`` on the container's command line."""
    tokens = [*(container.get("command") or [])[1:], *(container.get("args") or [])]
    out: list[str] = []
    for occ in find_flag(tokens, flag):
        out += tokens[occ.index : occ.index + occ.width]
    return out


def apply_suppress_args(
    before: dict[str, Any],
    container: dict[str, Any],
    flags: list[str],
    owned: set[str],
    reserved: set[str],
) -> None:
    """The adapter MUST NOT inject these: an added flag goes, a modified one gets the
    template's own value back (user-template entries are protected)."""
    for raw in flags:
        flag = flag_name(raw.strip()) or raw.strip()
        if flag not in owned or flag in reserved:
            continue
        original = _occurrence_tokens(before, flag)
        if not original or not _replace_flag(container, flag, original):
            remove_arg(container, flag)


def apply_env(
    container: dict[str, Any],
    env: list[dict[str, Any]],
    owned: set[str],
    user: set[str],
    reserved: set[str],
    merged: frozenset[str] = frozenset(),
) -> None:
    for var in env:
        name = var.get("name")
        if not name or name in reserved or name in merged:
            continue
        if name in user and name not in owned:
            continue  # user-owned env the adapter did not touch: protected
        # Adapter-owned: upsert; new: append (a later entry of the same name updates it).
        upsert_env_var(container, var)


def apply_suppress_env(
    before: dict[str, Any],
    container: dict[str, Any],
    names: list[str],
    owned: set[str],
    reserved: set[str],
) -> None:
    """As ``apply_suppress_args``: an added name goes, a modified one is restored."""
    for name in names:
        if name not in owned or name in reserved:
            continue
        original = env_map(before).get(name)
        if not original:
            remove_env(container, name)
            continue
        env = list(container.get("env") or [])
        positions = [i for i, e in enumerate(env) if e.get("name") == name]
        if not positions:
            env += [dict(e) for e in original]
        else:
            first = positions[0]
            env = [e for i, e in enumerate(env) if i not in positions]
            env[first:first] = [dict(e) for e in original]
        container["env"] = env


def apply_engine_overrides(
    before: dict[str, Any],
    after: dict[str, Any],
    overrides: EngineOverrides | None,
    reserved_args: tuple[str, ...] = (),
    reserved_env: tuple[str, ...] = (),
    merged_env: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The engine container ``after`` with ``overrides`` applied (``after`` is not mutated).

    ``before`` is the engine container as admitted, ``after`` as the adapter left it.
    """
    out = dict(after)
    if overrides is None:
        return out
    owned_args = adapter_owned_args(before, after)
    owned_env = adapter_owned_env(before, after)
    user_args = set(flags_in([*(before.get("command") or [])[1:], *(before.get("args") or [])]))
    user_env = set(env_map(before))
    r_args, r_env = set(reserved_args), set(reserved_env)
    apply_args(out, list(overrides.args or []), owned_args, user_args, r_args)
    apply_suppress_args(before, out, list(overrides.suppress_args or []), owned_args, r_args)
    env = [v.model_dump(by_alias=True, exclude_none=True) for v in overrides.env or []]
    apply_env(out, env, owned_env, user_env, r_env, frozenset(merged_env))
    apply_suppress_env(before, out, list(overrides.suppress_env or []), owned_env, r_env)
    return out
