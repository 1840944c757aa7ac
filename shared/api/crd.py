"""Generate the CacheBackend CustomResourceDefinition from the pydantic models.

The checked-in ``manifests/crd/inferencecache.io_cachebackends.yaml`` is this module's
output; ``tests/unit/admission/test_crd.py`` fails when the two drift. Regenerate with
``icache crd > manifests/crd/inferencecache.io_cachebackends.yaml``.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import yaml
from pydantic import BaseModel

from shared import constants as c
from shared.api.models import CacheBackendSpec, CacheBackendStatus

CRD_NAME = f"{c.PLURAL}.{c.GROUP}"

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Status of the Ready condition.",
    },
    {
        "name": "Endpoint",
        "type": "string",
        "jsonPath": ".status.endpoint",
        "description": "Observed endpoint of the remote tier.",
    },
    {
        "name": "Matched",
        "type": "integer",
        "jsonPath": ".status.matchedEnginePods",
        "description": "Engine pods matching spec.engineSelector.",
    },
    {
        "name": "Prefixes",
        "type": "integer",
        "jsonPath": ".status.indexParticipation.prefixCount",
        "description": "Prefix entries attributed to this backend in the cache index.",
    },
    {
        "name": "LastEvent",
        "type": "date",
        "jsonPath": ".status.indexParticipation.lastEventAt",
        "description": "Most recent KV event observed for this backend.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

_DROP_KEYS = {"title"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline $refs, collapse Optional (anyOf [X, null]) and map pydantic keys to CRD keys."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").split("/")[-1]])
        target.update(node)  # keep the field's own description over the model's
        node = target
    any_of = node.get("anyOf")
    if isinstance(any_of, list):
        non_null = [branch for branch in any_of if branch.get("type") != "null"]
        if len(non_null) < len(any_of) and len(non_null) == 1:
            del node["anyOf"]
            merged = dict(non_null[0])
            merged.update({k: v for k, v in node.items() if k != "default"})
            node = merged
            if "$ref" in node:
                return _resolve(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS or key == "$defs":
            continue
        if key == "default":
            continue  # pydantic's None defaults are not API defaults
        if key == "crd_default":
            out["default"] = value
            continue
        if key == "properties":
            out[key] = {name: _resolve(prop, defs) for name, prop in value.items()}
            continue
        out[key] = _resolve(value, defs)
    if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
        out.pop("additionalProperties")
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of one model, as the API server wants it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _resolve(raw, defs)
    return schema


def _status_schema() -> dict[str, Any]:
    schema = model_schema(CacheBackendStatus)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


@cache
def _crd() -> dict[str, Any]:
    spec_schema = model_schema(CacheBackendSpec)
    spec_schema["description"] = (
        "Desired state: the inference runtime, the engine-side cache, the optional remote "
        "tier and how engine pods are wired to them."
    )
    status_schema = _status_schema()
    status_schema["description"] = "Observed state written by the reconcile worker."
    root = {
        "type": "object",
        "description": (
            "CacheBackend describes an engine-side KV cache, an optional remote-storage tier, "
            "and the policy that wires inference engine pods (vLLM, SGLang) to them."
        ),
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation.",
            },
            "kind": {"type": "string", "description": "Kind is the REST resource kind."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": [c.SHORT_NAME],
                "categories": ["inferencecache"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd() -> dict[str, Any]:
    """The CRD as a fresh dict (callers may mutate it)."""
    return copy.deepcopy(_crd())


def crd_yaml() -> str:
    return "---\n" + yaml.safe_dump(crd(), sort_keys=False, width=100)


def spec_openapi_schema() -> dict[str, Any]:
    """The served schema of .spec (read-only use: cached)."""
    schema: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema
