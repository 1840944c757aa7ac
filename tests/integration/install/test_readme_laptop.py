"""The README's "A control plane on your laptop" steps, run as written.

The fenced block is taken from README.md and run by bash with ``set -eu`` in a scratch
directory that links the checkout's files (so ``$PWD/.cluster`` is the scratch one and
a developer's own ``make cluster-up`` is left alone), with the pinned kubectl
(tests/tools/kubectl.sh) first on PATH. Every command must succeed, and the last
``kubectl get cb`` must list the sample.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.samples import ROOT

SECTION = "## A control plane on your laptop"
# What the block needs from the checkout (the scratch directory links them).
LINKED = (
    "Makefile",
    "pyproject.toml",
    "constraints.txt",
    ".venv",
    "tests",
    "manifests",
    "shared",
    "webhook_svc",
    "reconciler",
    "icache_install",
)


def laptop_commands(readme: str) -> list[str]:
    """The commands of the section's first ``sh`` block, comments dropped."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, f"no ```sh block under {SECTION!r}"
    commands = []
    for line in match.group(1).splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def test_the_block_is_what_the_readme_says() -> None:
    """The block starts a control plane, applies the CRD as a file (not the directory,
    which holds a kustomization.yaml) and stops it."""
    commands = laptop_commands((ROOT / "README.md").read_text())
    assert commands[0] == "make cluster-up"
    assert commands[-1] == "make cluster-down"
    assert "kubectl apply -f manifests/crd/" not in commands


@pytest.fixture(scope="module")
def kubectl_dir() -> Path:
    """The pinned kubectl, built from the Go module proxy on first use."""
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "tools" / "kubectl.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, f"kubectl.sh failed:\n{done.stderr[-4000:]}"
    return Path(done.stdout.strip().splitlines()[-1]).parent


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    yield tmp_path
    # Whatever happened, no control plane is left running.
    subprocess.run(
        [sys.executable, "-m", "tests.harness.cli", "--dir", str(tmp_path / ".cluster"), "down"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.mark.services
def test_the_laptop_steps_run_as_written(kubectl_dir: Path, scratch: Path) -> None:
    commands = laptop_commands((ROOT / "README.md").read_text())
    script = "set -eu\n" + "\n".join(f"echo '+ {c}' >&2\n{c}" for c in commands) + "\n"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PATH"] = f"{kubectl_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert re.search(r"^vllm-host-only\s", done.stdout, re.M), done.stdout
    assert "valid cachebackend default/vllm-host-only" in done.stdout
    assert not (scratch / ".cluster").exists()  # make cluster-down removed it
