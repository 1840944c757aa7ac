"""A fast RFC 6902 JSON patch between two decoded JSON documents, and its applier.

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
"""

from __future__ import annotations

from typing import Any

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
