"""CacheBackends from YAML/JSON files in a directory (``--backends-from``).

Used by ``icache admit-pod`` and by the webhook's embedded mode. Every document of kind
CacheBackend in the inferencecache.io group is returned as written, ``status``
included (a managed backend's ``status.endpoint`` is what the Pod webhook wires to);
documents of other kinds are ignored, and ``kind: List`` documents are unpacked. A
backend without ``metadata.namespace`` is placed in ``default_namespace``, as
``kubectl apply`` would in the default namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared import constants as c

SUFFIXES = (".yaml", ".yml", ".json")


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
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BackendFileError(f"{path}: {exc}") from exc
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
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
            metadata = doc.setdefault("metadata", {})
            if isinstance(metadata, dict) and not metadata.get("namespace"):
                metadata["namespace"] = default_namespace
            backends.append(doc)
    return backends
