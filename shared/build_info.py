"""What `icache --version` prints: the version, the git commit and the build date.

* version: the installed package's metadata (``pyproject.toml``);
* commit and build date: ``ICACHE_BUILD_COMMIT`` / ``ICACHE_BUILD_DATE`` when set
  (the Dockerfiles turn the ``--build-arg``\\s of the same names into these, and
  ``make images`` passes them), else, in a git checkout, the checkout's HEAD (no build
  date: a source tree is not a build). Anything not known is said to be unknown.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

DISTRIBUTION: Final = "inference-cache"
COMMIT_ENV: Final = "ICACHE_BUILD_COMMIT"
DATE_ENV: Final = "ICACHE_BUILD_DATE"
# A build fact (commit, date) nobody recorded.
NOT_RECORDED: Final = "unknown"


@dataclass(frozen=True)
class BuildInfo:
    version: str
    commit: str
    build_date: str

    def line(self, prog: str = "icache") -> str:
        return f"{prog} {self.version} (commit {self.commit}, built {self.build_date})"


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return NOT_RECORDED


def checkout_commit(root: Path | None = None) -> str | None:
    """HEAD of the git checkout this package runs from, if it runs from one."""
    top = root or Path(__file__).resolve().parents[1]
    if not (top / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def build_info() -> BuildInfo:
    commit = os.environ.get(COMMIT_ENV, "").strip() or checkout_commit() or NOT_RECORDED
    date = os.environ.get(DATE_ENV, "").strip() or NOT_RECORDED
    return BuildInfo(package_version(), commit, date)
