"""A deep copy for decoded JSON: dicts, lists and scalars.

``copy.deepcopy`` keeps a memo of every node to preserve aliasing and cycles, which a
decoded AdmissionReview never has; that bookkeeping makes it about three times slower
than this copy, on the path of every admission. Anything that is not a JSON container
or scalar falls back to ``copy.deepcopy``, so the result is always a deep copy.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

T = TypeVar("T")

_IMMUTABLE = (str, int, float, bool, type(None))


def json_copy(value: T) -> T:
    """A deep copy of ``value``; fast for the JSON types, exact for everything else."""
    copied: T = _copy(value)
    return copied


def _copy(value: Any) -> Any:
    cls = type(value)
    if cls is dict:
        return {k: v if type(v) in _IMMUTABLE else _copy(v) for k, v in value.items()}
    if cls is list:
        return [v if type(v) in _IMMUTABLE else _copy(v) for v in value]
    if cls in _IMMUTABLE:
        return value
    return copy.deepcopy(value)
