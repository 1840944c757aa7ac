"""Field-scoped validation errors, rendered exactly like Kubernetes' field.Error.

``FieldError.error_string()`` is ``field.Error.Error()`` ("spec.replicas: Invalid
value: 0: must be ..."), ``body()`` is ``ErrorBody()`` (what a Status cause carries as
its message), and ``FieldPath`` renders paths like ``field.Path`` (``.child``,
``[key]``, ``[0]``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final


class ErrorType(StrEnum):
    """field.ErrorType: the value is the cause reason, ``.message`` its human string."""

    NOT_FOUND = "FieldValueNotFound"
    REQUIRED = "FieldValueRequired"
    DUPLICATE = "FieldValueDuplicate"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    TOO_MANY = "FieldValueTooMany"
    INTERNAL = "InternalError"
    TYPE_INVALID = "FieldValueTypeInvalid"

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES: Final[dict[ErrorType, str]] = {
    ErrorType.NOT_FOUND: "Not found",
    ErrorType.REQUIRED: "Required value",
    ErrorType.DUPLICATE: "Duplicate value",
    ErrorType.INVALID: "Invalid value",
    ErrorType.NOT_SUPPORTED: "Unsupported value",
    ErrorType.FORBIDDEN: "Forbidden",
    ErrorType.TOO_LONG: "Too long",
    ErrorType.TOO_MANY: "Too many",
    ErrorType.INTERNAL: "Internal error",
    ErrorType.TYPE_INVALID: "Invalid value",
}

# Types whose body never shows the bad value (field.Error.ErrorBody).
_VALUELESS: Final = frozenset(
    {ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG, ErrorType.INTERNAL}
)


class _Omit:
    """field.omitValue: an error whose body does not print the value."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Final = _Omit()


def _format_value(value: Any) -> str:
    """Go's rendering in ErrorBody: %q for strings, %v for scalars, "null" for nil."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return str(value)
    # Maps and lists: JSON is what a kubectl user can read back into a manifest.
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a bad value (dicts/lists compare by content)."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return value


@dataclass(frozen=True)
class FieldError:
    type: ErrorType
    field: str
    bad_value: Any
    detail: str

    def body(self) -> str:
        """field.Error.ErrorBody(): the cause message of a Status."""
        if self.type in _VALUELESS or self.bad_value is OMIT:
            text = self.type.message
        else:
            text = f"{self.type.message}: {_format_value(self.bad_value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def error_string(self) -> str:
        """field.Error.Error(): ``<field>: <body>``."""
        return f"{self.field}: {self.body()}"

    def key(self) -> tuple[str, str, Any, str]:
        """(Type, Field, BadValue, Detail): the identity ValidateUpdate compares."""
        return (self.type.value, self.field, _freeze(self.bad_value), self.detail)

    def __str__(self) -> str:
        return self.error_string()


# ----------------------------------------------------------------- constructors
# Named like the k8s.io/apimachinery/pkg/util/validation/field helpers.


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(ErrorType.REQUIRED, path, "", detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, path, value, detail)


def type_invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.TYPE_INVALID, path, value, detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, path, "", detail)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> FieldError:
    """field.NotSupported: ``Unsupported value: "x": supported values: "a", "b"``."""
    quoted = ", ".join(json.dumps(v) for v in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, path, value, f"supported values: {quoted}")


# ------------------------------------------------------------------------ paths


class FieldPath(str):
    """An immutable field.Path: ``FieldPath("spec").child("a").key("k").item(0)``."""

    __slots__ = ()

    def child(self, *names: str) -> FieldPath:
        out = str(self)
        for name in names:
            out = f"{out}.{name}" if out else name
        return FieldPath(out)

    def key(self, key: str) -> FieldPath:
        return FieldPath(f"{self}[{key}]")

    def item(self, index: int) -> FieldPath:
        """field.Path.Index: ``[0]``."""
        return FieldPath(f"{self}[{index}]")

    @classmethod
    def of(cls, parts: Sequence[str | int]) -> FieldPath:
        """From a location (strings are children, ints are indices)."""
        path = cls("")
        for part in parts:
            path = path.item(part) if isinstance(part, int) else path.child(part)
        return path


SPEC: Final = FieldPath("spec")


def aggregate_message(errors: Sequence[FieldError]) -> str:
    """errors.NewAggregate(...).Error(): one message bare, several in brackets, deduplicated."""
    seen: dict[str, None] = {}
    for error in errors:
        seen.setdefault(error.error_string(), None)
    messages = list(seen)
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"
