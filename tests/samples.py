"""Helpers to read the CacheBackend samples shipped in manifests/samples/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = ROOT / "manifests" / "samples"
CRD_PATH = ROOT / "manifests" / "crd" / "inferencecache.io_cachebackends.yaml"


def sample_documents() -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) for every YAML document under manifests/samples/."""
    docs = []
    for path in sorted(SAMPLES_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def sample_backends() -> list[tuple[str, dict[str, Any]]]:
    return [(n, d) for n, d in sample_documents() if d.get("kind") == "CacheBackend"]
