"""CacheBackends from YAML/JSON files in a directory (``--backends-from``).

Used by ``icache admit-pod`` and by the webhook's embedded mode. Every document of kind
CacheBackend in the inferencecache.io group is returned as written, ``status``
included (a managed backend's ``status.endpoint`` is what the Pod webhook wires to);
documents of other kinds are ignored, and list documents (``kind: List``,
``kind: CacheBackendList`` — what ``kubectl get -o yaml`` prints — or a bare YAML
sequence) are unpacked. A backend without ``metadata.namespace`` is placed in
``default_namespace``, as ``kubectl apply`` would in the default namespace.

Scalars are read with YAML 1.2 booleans (and timestamps kept as strings): only ``true``/``false`` are booleans, so an
unquoted ``off``, ``on``, ``yes`` or ``no`` (a kernel-check annotation value, a label
value) stays the string it was written as instead of turning into a YAML 1.1 boolean.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from shared import constants as c

SUFFIXES = (".yaml", ".yml", ".json")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader whose booleans are YAML 1.2's (true/false only) and whose timestamps
    stay strings (as Kubernetes reads them)."""


_DROPPED_TAGS = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class BackendFileError(ValueError):
    """A file under the directory is not parseable YAML/JSON."""


def _is_cache_backend(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == c.KIND
        and str(doc.get("apiVersion") or "").split("/", 1)[0] == c.GROUP
    )


def _documents(path: Path) -> list[Any]:
    try:
        docs = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_Yaml12Loader))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BackendFileError(f"{path}: {exc}") from exc
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            out.extend(doc)
        elif (
            isinstance(doc, dict)
            and str(doc.get("kind") or "").endswith("List")
            and isinstance(doc.get("items"), list)
        ):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def load_backends(
    directory: Path | str, default_namespace: str = "default"
) -> list[dict[str, Any]]:
    """Every CacheBackend document under ``directory`` (recursively, in path order)."""
    root = Path(directory)
    if not root.is_dir():
        raise BackendFileError(f"{root} is not a directory")
    backends: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        for doc in _documents(path):
            if not _is_cache_backend(doc):
                continue
            if not isinstance(doc.get("metadata"), dict):
                doc["metadata"] = {}
            metadata = doc["metadata"]
            if not metadata.get("namespace"):
                metadata["namespace"] = default_namespace
            backends.append(doc)
    return backends
