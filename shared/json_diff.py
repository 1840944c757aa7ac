"""The RFC 6902 JSON patches the admission webhooks answer with, in one place: a fast
diff between two decoded JSON documents, its applier, and the checked fallback chain.

The admission webhooks answer with a patch from the object they were sent to the one
they want. ``jsonpatch.make_patch`` finds moves and minimal list edits, a search that
costs 15-20 times what ``diff`` does on a wired pod, more than the wiring itself. What
the webhooks change is simpler: keys added to objects, items appended to lists, values
replaced. ``diff`` emits exactly that: ``add``/``remove`` per object key, ``add`` per
appended list item, element-wise recursion for lists of equal length, ``replace`` for
anything else. ``apply`` applies add/remove/replace patches so a caller can check a patch
really turns ``before`` into ``after`` before sending it.

Values are compared strictly (``True`` is not ``1``, ``1`` is not ``1.0``), as JSON
does; Python's ``==`` would miss such a change.

The chain (``json_patch``): the fast diff, checked by applying it to a copy; jsonpatch's
search for a minimal patch if that check ever fails; and for a Pod (``verified_patch``)
a coarser field-level patch (``field_level_patch``) if even that one fails, since a
wrong patch would wire the pod to something nobody rendered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jsonpatch

from shared.jsoncopy import json_copy

log = logging.getLogger("icache.webhook.pod")

Patch = list[dict[str, Any]]


class UnsupportedOpError(ValueError):
    """``apply`` handles add/remove/replace only."""


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1") if ("~" in key or "/" in key) else key


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~") if "~" in part else part


def same(a: Any, b: Any) -> bool:
    """JSON equality: same types all the way down (bool, int and float differ)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if kind is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def diff(before: Any, after: Any) -> Patch:
    """A patch turning ``before`` into ``after`` (empty when they are the same)."""
    ops: Patch = []
    _diff("", before, after, ops)
    return ops


def _diff(path: str, before: Any, after: Any, ops: Patch) -> None:
    if same(before, after):
        return
    kind = type(before)
    if kind is dict and type(after) is dict:
        # jsonpatch's order: removed keys, added keys, then the common ones.
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
        for key, value in before.items():
            if key in after:
                _diff(f"{path}/{_escape(key)}", value, after[key], ops)
        return
    if kind is list and type(after) is list:
        n = len(before)
        if len(after) >= n:
            # Same items first (edited in place), then the appended ones.
            for i in range(n):
                _diff(f"{path}/{i}", before[i], after[i], ops)
            for i in range(n, len(after)):
                ops.append({"op": "add", "path": f"{path}/{i}", "value": after[i]})
            return
    ops.append({"op": "replace", "path": path, "value": after})


def apply(doc: Any, patch: Patch) -> Any:
    """``doc`` with ``patch`` applied, in place (copy it first); raises on a bad path."""
    for op in patch:
        name, path = op["op"], op["path"]
        if name not in ("add", "remove", "replace"):
            raise UnsupportedOpError(name)
        if path == "":
            if name == "remove":
                raise UnsupportedOpError("remove of the whole document")
            doc = op["value"]
            continue
        parts = [_unescape(p) for p in path[1:].split("/")]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if type(parent) is list else parent[part]
        last = parts[-1]
        if type(parent) is list:
            index = len(parent) if last == "-" else int(last)
            if name == "add":
                if not 0 <= index <= len(parent):
                    raise IndexError(path)
                parent.insert(index, op["value"])
            elif name == "remove":
                del parent[index]
            else:
                parent[index] = op["value"]
        elif type(parent) is dict:
            if name == "add":
                parent[last] = op["value"]
            elif name == "remove":
                del parent[last]
            else:
                if last not in parent:
                    raise KeyError(path)
                parent[last] = op["value"]
        else:
            raise TypeError(f"{path}: parent is not a container")
    return doc


def patch_reproduces(before: dict[str, Any], patch: Patch, after: Any) -> bool:
    """Whether ``patch`` applied to a copy of ``before`` gives a document equal to ``after``."""
    try:
        try:
            patched = apply(json_copy(before), patch)
        except UnsupportedOpError:  # jsonpatch's patches may move and copy
            patched = jsonpatch.apply_patch(json_copy(before), patch, in_place=True)
        return same(patched, after)
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        LookupError,
        TypeError,
        ValueError,
    ):
        return False


def json_patch(
    before: dict[str, Any],
    after: dict[str, Any],
    fallback: Callable[[dict[str, Any], dict[str, Any]], Patch] | None = None,
) -> Patch:
    """An RFC 6902 patch from ``before`` to ``after`` (only what changes), each candidate
    applied and checked once.

    The fast diff, checked by applying it to a copy; jsonpatch's search for a minimal
    patch if that check ever fails. With ``fallback``, jsonpatch's patch is checked
    too, and ``fallback(before, after)`` answers if it fails.
    """
    fast = diff(before, after)
    if patch_reproduces(before, fast, after):
        return fast
    ops: Patch = jsonpatch.make_patch(before, after).patch
    if fallback is None or patch_reproduces(before, ops, after):
        return ops
    return fallback(before, after)


def _field_ops(prefix: str, before: dict[str, Any], after: dict[str, Any]) -> Patch:
    """One add/replace/remove per key of ``prefix`` whose value differs."""
    ops: Patch = []
    for key in [*before, *(k for k in after if k not in before)]:
        path = f"{prefix}/{jsonpatch.JsonPointer.from_parts([key]).path.lstrip('/')}"
        if key not in after:
            ops.append({"op": "remove", "path": path})
        elif key not in before:
            ops.append({"op": "add", "path": path, "value": after[key]})
        elif before[key] != after[key]:
            ops.append({"op": "replace", "path": path, "value": after[key]})
    return ops


def field_level_patch(before: dict[str, Any], after: dict[str, Any]) -> Patch:
    """A coarser but always-correct patch: whole annotations and whole spec fields."""
    ops: Patch = []
    for top in ("metadata", "spec"):
        b, a = before.get(top), after.get(top)
        if isinstance(b, dict) and isinstance(a, dict):
            ops += _field_ops(f"/{top}", b, a)
        elif b != a:
            ops += _field_ops(
                "", {top: b} if top in before else {}, {top: a} if top in after else {}
            )
    rest_b = {k: v for k, v in before.items() if k not in ("metadata", "spec")}
    rest_a = {k: v for k, v in after.items() if k not in ("metadata", "spec")}
    return ops + _field_ops("", rest_b, rest_a)


def _field_level_fallback(before: dict[str, Any], after: dict[str, Any]) -> Patch:
    log.warning("minimal JSON patch did not reproduce the wired pod; using field-level ops")
    return field_level_patch(before, after)


def verified_patch(before: dict[str, Any], after: dict[str, Any]) -> Patch:
    """The minimal patch, checked by applying it once; the field-level one if that ever
    fails (a wrong patch would wire the pod to something nobody rendered)."""
    return json_patch(before, after, fallback=_field_level_fallback)
