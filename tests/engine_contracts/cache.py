"""Where the engine releases' sources live, and the one helper tests read them through.

``make engine-sources`` (tests/engine_contracts/fetch.py) downloads each pinned release's
wheel once and keeps, per release, only what the contract tests read:

    <root>/<package>-<version>/files.txt   every file name the wheel ships (native
                                           extensions included), one a line
    <root>/<package>-<version>/src/...     the wheel's ``.py`` files
    <root>/<package>-<version>/.stamp      written last: the release is complete

``<root>`` is ``$ICACHE_ENGINE_SOURCES_CACHE``, else
``${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/engine-sources``.
"""

from __future__ import annotations

import os
from pathlib import Path

OVERRIDE_ENV = "ICACHE_ENGINE_SOURCES_CACHE"
STAMP = ".stamp"
MANIFEST = "files.txt"
SOURCES = "src"
# Bump when the layout above changes: a stamp of another layout is not complete.
LAYOUT = "1"


class MissingSourcesError(AssertionError):
    """A pinned release is not in the cache. An AssertionError, so the test FAILS
    (nothing is skipped in this project) with the command that fetches it."""


def cache_root() -> Path:
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inference-cache" / "engine-sources"


def release_dir(package: str, version: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / f"{package}-{version}"


def is_complete(directory: Path) -> bool:
    stamp = directory / STAMP
    return stamp.is_file() and stamp.read_text().strip() == LAYOUT


def require_release(package: str, version: str, root: Path | None = None) -> Path:
    """The release's directory; MissingSourcesError naming ``make engine-sources`` when
    it was never fetched (or a fetch was cut short)."""
    directory = release_dir(package, version, root)
    if not is_complete(directory):
        raise MissingSourcesError(
            f"{package} {version}: no sources in {directory}; run `make engine-sources` "
            f"(it downloads the pinned releases of shared/engine_versions.py; "
            f"{OVERRIDE_ENV} moves the cache)"
        )
    return directory
