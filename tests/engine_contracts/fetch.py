"""Fetch the pinned engine releases' sources into the cache outside the tree.

    python -m tests.engine_contracts.fetch [--print]

For every release of ``SAMPLE_TARGETS``, ``NEWEST`` and ``REJECTED``
(shared/engine_versions.py), and every vLLM release of the KV connector table
(``REGISTERED_KV_CONNECTORS``, shared/runtime_adapters/vllm_release.py):
``pip download --no-deps --only-binary=:all:`` the CPython 3.11 manylinux x86_64 wheel
(the one the engine images run) into a scratch directory, keep its ``.py`` files and the
list of its file names (tests/engine_contracts/cache.py), write the stamp last, delete
the wheel. A release already stamped is not fetched again, so a warm run takes well under
a second. ``--print`` prints the cache root and fetches nothing. pip's own settings
apply (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``): a directory of already-downloaded wheels
can serve as a find-links source; a fresh machine needs only PyPI.
"""

from __future__ import annotations

import argparse
import fcntl
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from shared.engine_versions import NEWEST, PACKAGES, REJECTED, SAMPLE_TARGETS, VLLM
from shared.runtime_adapters.vllm_release import REGISTERED_KV_CONNECTORS, release_text
from tests.engine_contracts.cache import (
    LAYOUT,
    MANIFEST,
    SOURCES,
    STAMP,
    cache_root,
    is_complete,
    release_dir,
)

# The interpreter and platforms of the engine images: wheels of other Pythons would
# carry the same sources, but pinning the tags keeps the download one file whatever
# Python runs this.
PIP_TARGET = (
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    "--abi",
    "abi3",
    "--abi",
    "none",
    # pip does not widen a manylinux_2_x tag to older ones: name each the pinned wheels
    # use (manylinux2014 widens to manylinux2010 and manylinux1).
    "--platform",
    "manylinux_2_34_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_27_x86_64",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "any",
)


def releases() -> list[tuple[str, str]]:
    """(package, version) of both pinned sets, of the rejected releases and of the vLLM
    releases whose KV connector registry the wiring reads, each once, in a stable order."""
    seen: list[tuple[str, str]] = []
    wanted = [(p, s.of(p)) for s in (SAMPLE_TARGETS, NEWEST) for p in PACKAGES]
    wanted += [(p, v) for p, versions in REJECTED.items() for v in versions]
    wanted += [(VLLM, release_text(r)) for r in sorted(REGISTERED_KV_CONNECTORS)]
    for item in wanted:
        if item not in seen:
            seen.append(item)
    return seen


def download(package: str, version: str, into: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        *PIP_TARGET,
        "--dest",
        str(into),
        f"{package}=={version}",
    ]
    try:
        subprocess.run(cmd, check=True)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(
            f"engine-sources: pip download {package}=={version} failed (exit {exc.returncode}); "
            "pip's error is above (PIP_INDEX_URL / PIP_FIND_LINKS choose where it looks)"
        ) from exc
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"engine-sources: expected one wheel for {package}=={version}: {wheels}")
    return wheels[0]


def extract(wheel: Path, into: Path) -> int:
    """The wheel's ``.py`` files under ``into/src`` and its file list in ``into/files.txt``;
    the number of ``.py`` files."""
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        for name in names:
            if name.endswith(".py") and ".." not in Path(name).parts:
                archive.extract(name, into / SOURCES)
                count += 1
    (into / MANIFEST).write_text("".join(f"{n}\n" for n in sorted(names)))
    return count


def fetch(package: str, version: str, root: Path) -> bool:
    """Fetch one release unless it is complete; True when it was fetched."""
    target = release_dir(package, version, root)
    if is_complete(target):
        return False
    root.mkdir(parents=True, exist_ok=True)
    # Serialise concurrent fetches (make and a second make in another worktree).
    with (root / f".{package}-{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(target):
            return False
        start = time.monotonic()
        with tempfile.TemporaryDirectory(dir=root, prefix=f".{package}-{version}.") as scratch:
            work = Path(scratch)
            wheel = download(package, version, work / "wheel")
            staged = work / "release"
            count = extract(wheel, staged)
            wheel.unlink()
            (staged / STAMP).write_text(LAYOUT + "\n")
            shutil.rmtree(target, ignore_errors=True)
            staged.rename(target)
        print(
            f"engine-sources: {package} {version}: {count} .py files "
            f"in {time.monotonic() - start:.0f}s",
            file=sys.stderr,
        )
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print", action="store_true", help="print the cache root only")
    args = parser.parse_args(argv)
    root = cache_root()
    if args.print:
        print(root)
        return 0
    for package, version in releases():
        fetch(package, version, root)
    print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
