"""Context-dependent CacheBackend defaults: what the mutating admission webhook adds.

Spec "Defaulting (mutating)": literal defaults ride on the CRD's default markers and
are stamped by the API server; the webhook

* materialises ``spec.integration`` so its nested defaults have a parent object. It
  also fills ``mode: Offload``, ``role: ReadWrite`` and ``failOpen: true`` when absent:
  against a real API server the markers have already stamped them (so they are not in
  the patch), and for a replayed review they make the patch self-contained — the same
  values either way;
* materialises ``spec.observation`` with ``firstEventTimeout: 5m`` (likewise filled
  when the object exists without it);
* on CREATE only, sets ``spec.autoscaling.minReplicas`` to ``spec.replicas`` (1 when
  unset) when ``spec.autoscaling`` is set, ``minReplicas`` is unset and replicas is
  not 0 (0 would violate minReplicas' Minimum=1; that case is rejected by validation
  instead). On UPDATE it is never computed: the floor is first-apply-only, later edits
  of spec.replicas do not move it.

Operator values are never replaced, values of the wrong type are left for validation
to reject, and defaulting a defaulted object changes nothing.
"""

from __future__ import annotations

from typing import Any, Final

from shared import constants as c
from shared.api.effective import DEFAULT_FIRST_EVENT_TIMEOUT
from shared.jsoncopy import json_copy

INTEGRATION_DEFAULTS: Final[dict[str, Any]] = {
    "mode": c.MODE_OFFLOAD,
    "role": c.ROLE_READ_WRITE,
    "failOpen": True,
}
OBSERVATION_DEFAULTS: Final[dict[str, Any]] = {"firstEventTimeout": DEFAULT_FIRST_EVENT_TIMEOUT}
DEFAULT_REPLICAS: Final = 1


def _materialise(spec: dict[str, Any], name: str, defaults: dict[str, Any]) -> None:
    if spec.get(name) is None:  # absent, or an explicit null (which means absent)
        spec[name] = {}
    block = spec[name]
    if not isinstance(block, dict):
        return  # wrong type: validation reports it
    for key, value in defaults.items():
        if block.get(key) is None:
            block[key] = json_copy(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def default_cachebackend(
    obj: dict[str, Any], operation: str, old_obj: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The defaulted copy of ``obj`` (never mutates it).

    ``operation`` is the admission operation (CREATE, UPDATE). ``old_obj`` is accepted
    for the webhook's call shape; defaulting does not depend on it, because the
    minReplicas default is decided by the operation alone (first apply = CREATE).
    """
    del old_obj
    out = json_copy(obj)
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    _materialise(spec, "integration", INTEGRATION_DEFAULTS)
    _materialise(spec, "observation", OBSERVATION_DEFAULTS)
    autoscaling = spec.get("autoscaling")
    if operation == "CREATE" and isinstance(autoscaling, dict):
        replicas = spec.get("replicas")
        if replicas is None:
            replicas = DEFAULT_REPLICAS
        if autoscaling.get("minReplicas") is None and _is_int(replicas) and replicas >= 1:
            autoscaling["minReplicas"] = replicas
    return out
