"""Helpers to read the CacheBackend samples shipped in manifests/samples/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared import constants as c
from shared import engine_versions as ev

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


def wiring_keys(path: Path) -> set[ev.WiringKey]:
    """(runtime, type, provider) of every CacheBackend in a YAML file (none elsewhere)."""
    if path.suffix not in (".yaml", ".yml"):
        return set()
    keys: set[ev.WiringKey] = set()
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and doc.get("kind") == "CacheBackend":
            spec = doc.get("spec") or {}
            provider = (spec.get("remoteStorage") or {}).get("provider")
            keys.add((str(spec.get("runtime")), str(spec.get("type") or c.TYPE_LMCACHE), provider))
    return keys


def sample_target_release(path: Path, package: str) -> str:
    """The release of ``package`` a file's engine images must name: its CacheBackends'
    own sample target where their wiring needs a newer release
    (``SAMPLE_TARGET_OVERRIDES``: vLLM's own offloading is refused below 0.33.0), else
    ``SAMPLE_TARGETS``."""
    wanted = {
        (
            ev.SAMPLE_TARGET_OVERRIDES.get(key)
            or ev.SAMPLE_TARGET_OVERRIDES.get((key[0], key[1], None))
            or {}
        ).get(package)
        for key in wiring_keys(path)
    }
    only = wanted.pop() if len(wanted) == 1 else None
    return only or ev.SAMPLE_TARGETS.of(package)


# ------------------------------------------------ the replay files of examples/admission

# The AdmissionReview replay files, with what each must come to (their README table):
# the unit tests judge them in-process, tests/images/check.py through the container.
EXAMPLES_DIR = ROOT / "examples" / "admission"

# file -> (validate allowed, number of causes, mutate patches, number of warnings)
EXPECTED_CACHEBACKEND_EXAMPLES: dict[str, tuple[bool, int, bool, int]] = {
    "create-vllm-host-only.json": (True, 0, True, 0),
    "create-vllm-lmcacheserver-managed.json": (True, 0, True, 0),
    "create-vllm-lmcacheserver-external.json": (True, 0, True, 0),
    "create-sglang-redis-managed.json": (True, 0, True, 0),
    "create-sglang-hicache.json": (True, 0, True, 0),
    "create-vllm-events-only.json": (True, 0, True, 0),
    "create-vllm-mooncake-managed.json": (True, 0, True, 0),
    "create-mooncake-without-host-network-warning.json": (True, 0, True, 1),
    "create-invalid-aggregated.json": (False, 7, True, 0),
    "create-invalid-schema.json": (False, 10, True, 1),
    "create-invalid-resources.json": (False, 3, True, 0),
    "update-introduces-violation.json": (False, 1, False, 0),
    "update-label-edit-on-preexisting-invalid.json": (True, 0, False, 0),
    "update-different-bad-value-is-fresh.json": (False, 1, False, 0),
    "mutate-create-defaults.json": (True, 0, True, 0),
    "mutate-update-keeps-min-replicas.json": (True, 0, False, 0),
    "mutate-create-already-defaulted.json": (True, 0, False, 0),
    "delete.json": (True, 0, False, 0),
}

EXAMPLES_SUBSCRIBER_IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:0.1.0"
# file -> (outcome, reason, backend annotation or None), with --kvevent-subscriber-image
EXPECTED_POD_EXAMPLES = {
    "pod-vllm-host-only.json": ("injected", "injected", "default/vllm-host-only"),
    "pod-sglang-lmcache-mp.json": ("injected", "injected", "default/sglang-host-only"),
    "pod-sglang-hicache.json": ("injected", "injected", "default/sglang-hicache"),
    "pod-vllm-events-only.json": ("injected", "events_only", "default/vllm-events-only"),
    "pod-vllm-lmcacheserver-external.json": (
        "injected",
        "injected",
        "default/vllm-lmcache-external",
    ),
    "pod-mooncake-no-endpoint-fail-open.json": ("fail_open", "missing_endpoint", None),
    "pod-no-match-fail-open.json": ("fail_open", "no_match", None),
    "pod-skip-inject.json": ("skipped", "skip_inject_annotation", None),
}
