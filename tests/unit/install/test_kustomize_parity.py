"""`icache manifests` prints exactly what kustomize builds.

The kustomization in manifests/ is the one source of the install. The no-kustomize
path (`icache manifests`, `kubectl apply -f manifests/rendered/...`) prints files that
the pinned kustomize (tests/tools/kustomize.sh, built from the Go module proxy)
rendered into manifests/rendered/ (`make manifests`). Here the same kustomize renders
every variant again and the checked-in file must match it, so a change to the
kustomization that was not re-rendered fails. `--image-tag` must equal what an
overlay's `images:` entry does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_install.manifests_cli import VARIANTS, render_manifests

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"


def kustomize_build(kustomize: Path, directory: Path) -> str:
    done = subprocess.run(
        [str(kustomize), "build", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def without_header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_rendered_file_is_what_kustomize_builds_now(kustomize_bin: Path, variant: str) -> None:
    file, source = VARIANTS[variant]
    expected = kustomize_build(kustomize_bin, MANIFESTS / source)
    assert len(documents(expected)) > 20, "kustomize rendered almost nothing"
    actual = without_header((MANIFESTS / "rendered" / file).read_text())
    assert actual == expected, (
        f"manifests/rendered/{file} is stale: run `make manifests` and commit the result"
    )


def test_image_tag_override_matches_a_kustomize_images_overlay(
    kustomize_bin: Path, tmp_path: Path
) -> None:
    """`icache manifests --image-tag T` == an overlay with `images: newTag: T`."""
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(MANIFESTS, tmp_path)],
        "images": [
            {"name": "ghcr.io/inference-cache/webhook", "newTag": "9.9.9"},
            {"name": "ghcr.io/inference-cache/worker", "newTag": "9.9.9"},
        ],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    expected = documents(kustomize_build(kustomize_bin, tmp_path))
    assert render_manifests(image_tag="9.9.9") == expected
