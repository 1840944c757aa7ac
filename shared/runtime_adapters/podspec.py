"""Merge primitives the runtime adapters wire engine pods with.

Every primitive converges on a desired value instead of appending a duplicate, so that
re-admitting an already wired pod changes nothing (an empty JSON patch). They work on
plain dicts in the Kubernetes wire shape (camelCase) and mutate the container/pod they
are given: adapters call them on a deep copy, never on the admission request's object.

Argument vocabulary. A *flag* is a token starting with ``--``. A flag carries its value
either as the next token (``--flag value``, the "pair" form) or inline (``--flag=value``,
the "eq" form). A flag followed by another flag or by nothing has no value (the "bare"
form): correct for boolean flags, malformed for value flags.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from shared.runtime_adapters.base import InjectionRejectedError

ArgForm = Literal["pair", "eq", "bare"]


@dataclass(frozen=True)
class FlagOccurrence:
    """One appearance of a flag in a token list."""

    index: int
    form: ArgForm
    value: str | None  # None only for the bare form

    @property
    def width(self) -> int:
        """How many tokens the occurrence spans."""
        return 2 if self.form == "pair" else 1


def flag_name(token: str) -> str | None:
    """The flag a token starts, without an inline value; None for a non-flag token."""
    if not token.startswith("--") or token == "--":
        return None
    return token.split("=", 1)[0]


def find_flag(tokens: list[str], flag: str) -> list[FlagOccurrence]:
    """Every occurrence of ``flag`` in ``tokens``, in order."""
    found: list[FlagOccurrence] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == flag:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not nxt.startswith("--"):
                found.append(FlagOccurrence(i, "pair", nxt))
                i += 2
                continue
            found.append(FlagOccurrence(i, "bare", None))
        elif token.startswith(flag + "="):
            found.append(FlagOccurrence(i, "eq", token[len(flag) + 1 :]))
        i += 1
    return found


def flags_in(tokens: list[str]) -> dict[str, list[str | None]]:
    """Flag -> the values of its occurrences (None for bare), in order of appearance.

    A token following a flag is read as that flag's value; this is the same reading
    ``find_flag`` uses, so a diff of two token lists by this map is consistent with it.
    """
    out: dict[str, list[str | None]] = {}
    i = 0
    while i < len(tokens):
        name = flag_name(tokens[i])
        if name is None:
            i += 1
            continue
        if "=" in tokens[i]:
            out.setdefault(name, []).append(tokens[i].split("=", 1)[1])
            i += 1
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if nxt is not None and not nxt.startswith("--"):
            out.setdefault(name, []).append(nxt)
            i += 2
        else:
            out.setdefault(name, []).append(None)
            i += 1
    return out


def _render(occurrence_form: ArgForm, flag: str, value: str) -> list[str]:
    if occurrence_form == "eq":
        return [f"{flag}={value}"]
    return [flag, value]


def upsert_arg_tokens(tokens: list[str], flag: str, value: str) -> list[str]:
    """``tokens`` with exactly one ``flag`` carrying ``value``.

    The first occurrence keeps its position and its form (``--flag value`` or
    ``--flag=value``); a bare occurrence becomes the pair form; later duplicates are
    dropped. Absent: appended as ``--flag value``.
    """
    found = find_flag(tokens, flag)
    if not found:
        return [*tokens, flag, value]
    first, rest = found[0], found[1:]
    out = list(tokens)
    for occ in reversed(rest):
        del out[occ.index : occ.index + occ.width]
    out[first.index : first.index + first.width] = _render(first.form, flag, value)
    return out


def upsert_flag_tokens(tokens: list[str], flag: str) -> list[str]:
    """``tokens`` with exactly one bare boolean ``flag`` (first position kept)."""
    positions = [i for i, t in enumerate(tokens) if t == flag]
    if not positions:
        return [*tokens, flag]
    out = list(tokens)
    for i in reversed(positions[1:]):
        del out[i]
    return out


def remove_flag_tokens(tokens: list[str], flag: str) -> list[str]:
    """``tokens`` without any occurrence of ``flag`` (and the value it carries)."""
    out = list(tokens)
    for occ in reversed(find_flag(tokens, flag)):
        del out[occ.index : occ.index + occ.width]
    return out


# --------------------------------------------------------------------- containers


def _command_flag_present(container: dict[str, Any], flag: str) -> bool:
    command = container.get("command") or []
    return bool(find_flag(list(command[1:]), flag))


def upsert_arg(container: dict[str, Any], flag: str, value: str) -> None:
    """Converge ``flag`` to ``value`` on a container.

    The flag is updated where it already is: in ``args`` or, when the user put the whole
    CLI in ``command`` and the flag lives there, in ``command``. Otherwise it is appended
    to ``args`` (Kubernetes appends ``args`` to ``command``), which also works for a
    ``command`` that holds the CLI and no ``args``.
    """
    args = list(container.get("args") or [])
    if not find_flag(args, flag) and _command_flag_present(container, flag):
        command = list(container["command"])
        container["command"] = [command[0], *upsert_arg_tokens(command[1:], flag, value)]
        return
    container["args"] = upsert_arg_tokens(args, flag, value)


def converge_last_arg(container: dict[str, Any], flag: str, value: str) -> None:
    """Leave exactly one ``flag``, carrying ``value``, where argparse reads the last one.

    With the flag in ``args`` (which Kubernetes appends after ``command``), the
    occurrences in ``command`` are dropped and the one in ``args`` converges; with it
    only in ``command``, it converges there; absent, it is appended to ``args``.
    """
    command = list(container.get("command") or [])
    if find_flag(list(container.get("args") or []), flag) and find_flag(command[1:], flag):
        container["command"] = [command[0], *remove_flag_tokens(command[1:], flag)]
    upsert_arg(container, flag, value)


def upsert_flag(container: dict[str, Any], flag: str) -> None:
    """Converge a boolean ``flag`` on a container (see ``upsert_arg`` for placement)."""
    args = list(container.get("args") or [])
    command = list(container.get("command") or [])
    if flag not in args and flag in command[1:]:
        container["command"] = [command[0], *upsert_flag_tokens(command[1:], flag)]
        return
    container["args"] = upsert_flag_tokens(args, flag)


def remove_arg(container: dict[str, Any], flag: str) -> None:
    """Drop every occurrence of ``flag`` from ``args`` and ``command`` (never command[0])."""
    if "args" in container:
        container["args"] = remove_flag_tokens(list(container.get("args") or []), flag)
    command = list(container.get("command") or [])
    if command and find_flag(command[1:], flag):
        container["command"] = [command[0], *remove_flag_tokens(command[1:], flag)]


def cli_tokens(container: dict[str, Any]) -> list[str]:
    """The engine's full command line as Kubernetes runs it: command then args."""
    return [*(container.get("command") or []), *(container.get("args") or [])]


_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})


def runs_shell_script(container: dict[str, Any]) -> bool:
    """True when the container runs ``sh -c '<script>'``: appended args never reach the CLI.

    Kubernetes appends ``args`` to ``command``; for ``sh -c script`` extra words become the
    script's positional parameters, so an adapter cannot wire such an engine by args.
    """
    tokens = cli_tokens(container)
    if len(tokens) < 2 or posixpath.basename(tokens[0]) not in _SHELLS:
        return False
    option = tokens[1]
    return option.startswith("-") and not option.startswith("--") and "c" in option[1:]


def env_index(container: dict[str, Any], name: str) -> list[int]:
    return [i for i, e in enumerate(container.get("env") or []) if e.get("name") == name]


def upsert_env(container: dict[str, Any], name: str, value: str) -> None:
    """Converge env ``name`` to the literal ``value`` (first entry kept, duplicates dropped)."""
    upsert_env_var(container, {"name": name, "value": value})


def upsert_env_var(container: dict[str, Any], var: dict[str, Any]) -> None:
    """Converge a whole EnvVar (value or valueFrom) by name."""
    env = list(container.get("env") or [])
    positions = env_index(container, var["name"])
    if not positions:
        env.append(dict(var))
    else:
        for i in reversed(positions[1:]):
            del env[i]
        env[positions[0]] = dict(var)
    container["env"] = env


def remove_env(container: dict[str, Any], name: str) -> None:
    if not env_index(container, name):
        return
    env = [e for e in container.get("env") or [] if e.get("name") != name]
    if env:
        container["env"] = env
    else:
        container.pop("env", None)


def env_map(container: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Name -> the EnvVar entries of that name, for diffs."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in container.get("env") or []:
        out.setdefault(str(e.get("name")), []).append(e)
    return out


# ------------------------------------------------------------ pods: containers, volumes


def find_named(items: Iterable[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    for item in items or []:
        if item.get("name") == name:
            return item
    return None


def all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Init, regular and ephemeral containers: names are unique across all of them."""
    spec = pod.get("spec") or {}
    return [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]


# List fields of a container merged by key when converging onto a prior render.
_MERGED_LISTS = (("volumeMounts", "mountPath"), ("env", "name"))


def merge_container(existing: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` written over ``existing``, keeping what others added to it.

    The API server adds fields to every container (imagePullPolicy, terminationMessage*,
    the ServiceAccount token mount) and other mutating webhooks may add env or mounts.
    Rendered keys win; for volumeMounts (by mountPath) and env (by name) the rendered
    entries come first and entries the render does not name are kept after them, so a
    persisted pod re-renders to itself (an empty patch).
    """
    merged = {**existing, **desired}
    for field, key in _MERGED_LISTS:
        if field not in desired or not existing.get(field):
            continue
        ours = {item.get(key) for item in desired[field]}
        merged[field] = [
            *desired[field],
            *(item for item in existing[field] if item.get(key) not in ours),
        ]
    return merged


def adopt_container(
    pod: dict[str, Any],
    field: Literal["initContainers", "containers"],
    desired: dict[str, Any],
    ours: bool,
) -> None:
    """Converge container ``desired['name']`` in ``spec[field]`` onto ``desired``.

    When a container of that name exists it must be the adapter's own prior injection
    (``ours``); its position is kept and the desired keys are written over it, so fields
    the API server defaulted (imagePullPolicy, terminationMessagePath, ...) survive and a
    re-admitted pod converges to an empty patch (see ``merge_container``). Any other object of that name is an
    operator's squatting a reserved name: rejected, never silently overwritten.
    """
    spec = pod.setdefault("spec", {})
    name = desired["name"]
    items = list(spec.get(field) or [])
    for i, item in enumerate(items):
        if item.get("name") == name:
            if not ours:
                raise InjectionRejectedError(
                    f"the pod already has a container named {name!r} that inference-cache did "
                    "not render; rename it to let the pod be wired"
                )
            items[i] = merge_container(item, desired)
            spec[field] = items
            return
    if find_named(all_containers(pod), name) is not None:
        raise InjectionRejectedError(
            f"container name {name!r} is reserved by inference-cache and already used in the pod"
        )
    items.append(desired)
    spec[field] = items


def adopt_volume(pod: dict[str, Any], desired: dict[str, Any], ours: bool) -> None:
    """Converge pod volume ``desired['name']``; a volume of that name we did not render is
    rejected (see ``adopt_container``)."""
    spec = pod.setdefault("spec", {})
    volumes = list(spec.get("volumes") or [])
    for i, vol in enumerate(volumes):
        if vol.get("name") == desired["name"]:
            if not ours:
                raise InjectionRejectedError(
                    f"the pod already has a volume named {desired['name']!r} that "
                    "inference-cache did not render; rename it to let the pod be wired"
                )
            volumes[i] = desired
            spec["volumes"] = volumes
            return
    volumes.append(desired)
    spec["volumes"] = volumes


def normalize_path(path: str) -> str:
    """``/dev/shm/`` and ``/dev/shm`` are the same mount point."""
    return posixpath.normpath(path) if path else path


def mount_at(container: dict[str, Any], mount_path: str) -> dict[str, Any] | None:
    target = normalize_path(mount_path)
    for m in container.get("volumeMounts") or []:
        if normalize_path(str(m.get("mountPath") or "")) == target:
            return dict(m)
    return None


def upsert_mount_by_name(container: dict[str, Any], mount: dict[str, Any]) -> None:
    """Converge the mount of volume ``mount['name']`` at ``mount['mountPath']``.

    A mount of the same volume at the same path is updated in place (extra keys kept);
    a mount of the same path by another volume is a conflict the caller must have
    rejected before (a duplicate mountPath makes an invalid Pod).
    """
    mounts = list(container.get("volumeMounts") or [])
    target = normalize_path(mount["mountPath"])
    for i, m in enumerate(mounts):
        if normalize_path(str(m.get("mountPath") or "")) != target:
            continue
        if m.get("name") != mount["name"]:
            raise InjectionRejectedError(
                f"container {container.get('name')!r} already mounts volume {m.get('name')!r} "
                f"at {mount['mountPath']}"
            )
        merged = {**m, **mount}
        if "readOnly" not in mount:
            merged.pop("readOnly", None)
        mounts[i] = merged
        container["volumeMounts"] = mounts
        return
    mounts.append(mount)
    container["volumeMounts"] = mounts


def set_pod_annotation(pod: dict[str, Any], key: str, value: str | None) -> None:
    """Set (or, for None, remove) one annotation of ``pod`` in place; an emptied
    annotations map is dropped so re-admission converges on an equal pod."""
    metadata = pod.setdefault("metadata", {})
    annotations = metadata.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, dict) else {}
    if value is None:
        annotations.pop(key, None)
    else:
        annotations[key] = value
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
