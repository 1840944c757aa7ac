"""Issue 13 item 3: `icache manifests` prints exactly what kustomize builds.

The kustomization in manifests/ is the one source of the install. `icache
manifests` (the no-kustomize path: `icache manifests | kubectl apply -f -`) renders
it with a small Python subset of kustomize; this test renders the same
kustomizations with the real, pinned kustomize (tests/tools/kustomize.sh, built
from the Go module proxy) and requires the same objects in the same order, so the
two can never drift: a kustomization feature the subset gets wrong fails here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_install.manifests_cli import render

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


def kustomize_build(kustomize: Path, directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(kustomize), "build", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def assert_same(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> None:
    def ids(docs: list[dict[str, Any]]) -> list[str]:
        return [
            f"{d['kind']}/{d['metadata'].get('namespace', '')}/{d['metadata']['name']}"
            for d in docs
        ]

    assert ids(actual) == ids(expected), "objects or their order differ"
    for want, got in zip(expected, actual, strict=True):
        assert got == want, f"{want['kind']} {want['metadata']['name']} differs"


def overlay(tmp_path: Path, body: dict[str, Any]) -> Path:
    """A kustomization in ``tmp_path`` whose paths point into manifests/."""
    rel = Path(os.path.relpath(MANIFESTS, tmp_path))
    text = yaml.safe_dump(body).replace("MANIFESTS", str(rel))
    (tmp_path / "kustomization.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize("variant", [".", "overlays/cert-manager"])
def test_each_variant_renders_as_kustomize_builds_it(kustomize_bin: Path, variant: str) -> None:
    directory = MANIFESTS / variant
    expected = kustomize_build(kustomize_bin, directory)
    assert len(expected) > 20, "kustomize rendered almost nothing: the comparison is empty"
    assert_same(expected, render(directory))


def test_external_redis_component_renders_as_kustomize_builds_it(
    kustomize_bin: Path, tmp_path: Path
) -> None:
    directory = overlay(
        tmp_path,
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "inference-cache-system",
            "resources": ["MANIFESTS/crd", "MANIFESTS/rbac", "MANIFESTS/base"],
            "components": ["MANIFESTS/components/external-redis"],
        },
    )
    expected = kustomize_build(kustomize_bin, directory)
    assert not [d for d in expected if d["metadata"]["name"] == "inference-cache-redis"]
    assert_same(expected, render(directory))


def test_image_tag_override_matches_a_kustomize_images_overlay(
    kustomize_bin: Path, tmp_path: Path
) -> None:
    """`icache manifests --image-tag T` == an overlay with `images: newTag: T`."""
    directory = overlay(
        tmp_path,
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["MANIFESTS"],
            "images": [
                {"name": "ghcr.io/inference-cache/webhook", "newTag": "9.9.9"},
                {"name": "ghcr.io/inference-cache/worker", "newTag": "9.9.9"},
            ],
        },
    )
    assert_same(kustomize_build(kustomize_bin, directory), render(MANIFESTS, image_tag="9.9.9"))
