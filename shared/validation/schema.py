"""Structural (CRD-schema-level) validation of .spec, reported like the API server does.

The API server validates a CacheBackend against the CRD's OpenAPI schema before any
webhook sees it; a replayed AdmissionReview (curl, tests) bypasses that, so admission
parses the spec with the same pydantic models the CRD is generated from, in strict
mode (no "3" for an integer, no 0.5 for an int-or-string), and converts each pydantic
error into the field error the API server would have produced:

    missing field            -> spec.runtime: Required value
    enum / Literal           -> spec.type: Unsupported value: "Mooncake": supported values: ...
    wrong JSON type          -> spec.replicas: Invalid value: "string": spec.replicas in body
                                must be of type integer: "string"
    minimum / maximum        -> spec.replicas: Invalid value: -1: spec.replicas in body should
                                be greater than or equal to 0
    pattern                  -> ... in body should match '<pattern>'

So that the semantic rules can still judge the rest of the object, the offending
fields are then pruned (a field with a missing required child loses its nearest
optional parent; a bad list item loses its list) and the spec is parsed again. The
pruned locations are returned so rules that read them are skipped rather than run on
a value the operator did not write.
"""

from __future__ import annotations

import copy
import re
import types
from collections.abc import Sequence
from functools import cache
from typing import Annotated, Any, Final, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from shared import constants as c
from shared.api.models import CacheBackendSpec
from shared.validation.field_errors import (
    SPEC,
    ErrorType,
    FieldError,
    FieldPath,
    invalid,
    not_supported,
    required,
    type_invalid,
)

Loc = tuple[str | int, ...]

# A missing required field is normally handled by pruning its nearest optional parent.
# For these that would hide more than the field itself — .spec cannot be pruned, and a
# spec.autoscaling without maxReplicas is still an autoscaling request the other rules
# judge (events-only, host-only, Mooncake) — so a placeholder stands in instead and the
# field (only) is marked pruned: no rule reads the placeholder.
_PLACEHOLDERS: Final[dict[Loc, Any]] = {
    ("runtime",): c.RUNTIME_VLLM,
    ("autoscaling", "maxReplicas"): 1,
}

_TYPE_NAMES: Final[dict[str, str]] = {
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "string_type": "string",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "float_type": "number",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "list_type": "array",
}

_QUOTED_RE = re.compile(r"'((?:[^'\\]|\\.)*)'")

_MAX_PRUNE_ROUNDS = 8


def json_type(value: Any) -> str:
    """The JSON type name the API server reports for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _step(data: Any, part: str | int) -> tuple[bool, Any]:
    if isinstance(part, int) and isinstance(data, list) and 0 <= part < len(data):
        return True, data[part]
    if isinstance(part, str) and isinstance(data, dict) and part in data:
        return True, data[part]
    return False, None


def _lookup(data: Any, loc: Loc) -> tuple[bool, Any]:
    for part in loc:
        found, data = _step(data, part)
        if not found:
            return False, None
    return True, data


def _real_loc(data: Any, loc: Loc, missing: bool) -> Loc:
    """The error location trimmed to what exists in the input.

    pydantic appends union member tags ("int", "str") to the location of an
    int-or-string value; those are not fields. A missing field keeps its last element.
    """
    end = len(loc) - 1 if missing else len(loc)
    current = data
    for index, part in enumerate(loc[:end]):
        found, current = _step(current, part)
        if not found:
            return loc[:index]
    return loc


def _unwrap(annotation: Any) -> Any:
    """The concrete type under Optional[...] / Annotated[...] (a union stays a union)."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


@cache
def _wire_fields(model: type[BaseModel]) -> dict[str, Any]:
    """Wire name -> annotation of a model's fields."""
    return {(info.alias or name): info.annotation for name, info in model.model_fields.items()}


def _path(loc: Loc) -> FieldPath:
    """The field.Path of a location in .spec: ``.child`` for object properties, ``[key]``
    for map keys (``limits[memory]``, ``matchLabels[app]``), ``[0]`` for list items."""
    path = SPEC
    current: Any = CacheBackendSpec
    for part in loc:
        current = _unwrap(current)
        origin = get_origin(current)
        if isinstance(part, int):
            path = path.item(part)
            current = get_args(current)[0] if origin is list and get_args(current) else None
        elif origin is dict:
            path = path.key(part)
            args = get_args(current)
            current = args[1] if len(args) == 2 else None
        else:
            path = path.child(part)
            is_model = isinstance(current, type) and issubclass(current, BaseModel)
            current = _wire_fields(current).get(part) if is_model else None
    return path


def _convert(error: ErrorDetails, data: Any) -> tuple[Loc, FieldError]:
    kind = error["type"]
    missing = kind == "missing"
    loc = _real_loc(data, tuple(error["loc"]), missing)
    path = _path(loc)
    value = error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if missing:
        return loc, required(path)
    if kind in ("literal_error", "enum"):
        expected = _QUOTED_RE.findall(str(ctx.get("expected", "")))
        return loc, not_supported(path, value, expected)
    if kind in _TYPE_NAMES:
        got = json_type(value)
        detail = f'{path} in body must be of type {_TYPE_NAMES[kind]}: "{got}"'
        return loc, type_invalid(path, got, detail)
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {
            "greater_than_equal": "greater than or equal to",
            "greater_than": "greater than",
            "less_than_equal": "less than or equal to",
            "less_than": "less than",
        }[kind]
        bound = next(iter(ctx.values()), "")
        return loc, invalid(path, value, f"{path} in body should be {words} {bound}")
    if kind == "string_pattern_mismatch":
        return loc, invalid(path, value, f"{path} in body should match '{ctx.get('pattern')}'")
    return loc, invalid(path, value, str(error.get("msg", "invalid value")))


def _merge_union_errors(items: Sequence[tuple[Loc, FieldError]]) -> list[tuple[Loc, FieldError]]:
    """An int-or-string value fails once per union member: report it once."""
    out: list[tuple[Loc, FieldError]] = []
    by_field: dict[str, int] = {}
    for loc, err in items:
        seen = by_field.get(err.field)
        if seen is not None and err.type is ErrorType.TYPE_INVALID:
            prev_loc, prev = out[seen]
            if prev.type is ErrorType.TYPE_INVALID:
                merged_types = _merge_type_detail(prev.detail, err.detail)
                out[seen] = (prev_loc, type_invalid(prev.field, prev.bad_value, merged_types))
                continue
        by_field.setdefault(err.field, len(out))
        out.append((loc, err))
    return out


def _merge_type_detail(first: str, second: str) -> str:
    # "<p> in body must be of type integer: "x"" + "... string: "x"" -> "integer or string".
    head, _, tail = first.partition(" must be of type ")
    type_a, _, got = tail.partition(": ")
    type_b = second.partition(" must be of type ")[2].partition(": ")[0]
    return f"{head} must be of type {type_a} or {type_b}: {got}"


def _delete(data: Any, loc: Loc) -> bool:
    found, parent = _lookup(data, loc[:-1])
    if not found:
        return False
    last = loc[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
        return True
    return False


def _prune_target(loc: Loc, missing: bool) -> Loc:
    """What to remove so the rest of the spec parses."""
    target = loc[:-1] if missing else loc
    # Removing one list item would shift the locations of the others: drop the list.
    while target and isinstance(target[-1], int):
        target = target[:-1]
    return target


def drop_nulls(value: Any) -> Any:
    """A copy without the object properties whose value is null.

    The API server prunes a null property of a non-nullable schema before defaulting
    and validation, so ``replicas: null`` means "unset" (and is then defaulted) and a
    required ``maxReplicas: null`` is "Required value", not a type error. Null list
    items are kept: they are type errors.
    """
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def parse_spec(
    raw_spec: dict[str, Any],
) -> tuple[CacheBackendSpec | None, list[FieldError], list[Loc]]:
    """(parsed spec or None, schema errors, pruned locations)."""
    try:
        return _validate(raw_spec), [], []
    except ValidationError as first:
        failure = first.errors()
    converted = _merge_union_errors([_convert(e, raw_spec) for e in failure])
    errors = [err for _, err in converted]
    work = copy.deepcopy(raw_spec)
    pruned: list[Loc] = []
    for _ in range(_MAX_PRUNE_ROUNDS):
        # Decide every target on the unmodified spec first: a union value fails once per
        # member, and re-locating the second failure after the first deletion would
        # climb to (and delete) its parent.
        targets: list[Loc] = []
        placeholders: list[Loc] = []
        for error in failure:
            missing = error["type"] == "missing"
            loc = _real_loc(work, tuple(error["loc"]), missing)
            if missing and loc in _PLACEHOLDERS:
                if loc not in placeholders:
                    placeholders.append(loc)
                continue
            target = _prune_target(loc, missing)
            if target and target not in targets:
                targets.append(target)
        progress = False
        for loc in placeholders:
            found, parent = _lookup(work, loc[:-1])
            if found and isinstance(parent, dict):
                parent[loc[-1]] = _PLACEHOLDERS[loc]
                pruned.append(loc)
                progress = True
        for target in targets:
            if _delete(work, target):
                pruned.append(target)
                progress = True
        if not progress:
            return None, errors, pruned
        try:
            return _validate(work), errors, pruned
        except ValidationError as again:
            failure = again.errors()
    return None, errors, pruned


def _validate(raw_spec: dict[str, Any]) -> CacheBackendSpec:
    # Wire names only (the API server prunes snake_case spellings as unknown fields).
    return CacheBackendSpec.model_validate(raw_spec, strict=True, by_alias=True, by_name=False)


def spec_type_error(raw_spec: Any) -> FieldError:
    """.spec is present but not an object (or null/absent: Required)."""
    if raw_spec is None:
        return required(SPEC)
    got = json_type(raw_spec)
    return type_invalid(SPEC, got, f'spec in body must be of type object: "{got}"')
