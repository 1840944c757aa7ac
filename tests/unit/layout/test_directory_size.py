"""No directory of the tree holds more than 20 Python modules (decision "A directory a
newcomer can read in one look").

A module is any ``.py`` file directly in the directory (``__init__.py`` and
``conftest.py`` included); hidden directories (``.venv``, ``.git``) and the
directories ``.gitignore`` names (``build/``) are not the tree.
A directory past the limit is split into sub-packages named for what they hold, as
tests/unit/, tests/integration/ and tests/e2e/ are.

``OVER_THE_LIMIT`` would name a directory still being split, at its size when the
rule was written: it may not grow, and the entry fails as stale once the directory is
within the limit, so the list only shrinks. It is empty: every directory is within.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MAX_MODULES = 20
OVER_THE_LIMIT: dict[str, int] = {}


def modules_per_directory(root: Path) -> Counter[str]:
    """How many ``.py`` files each directory under ``root`` holds directly, keyed by
    its path relative to ``root`` (``.`` for ``root`` itself); hidden trees and the
    directories ``root/.gitignore`` ignores (build output such as ``build/``) skipped."""
    ignored = ignored_directory_patterns(root)
    counts: Counter[str] = Counter()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts[:-1]
        if any(part.startswith(".") or _matches(part, ignored) for part in parts):
            continue
        counts[path.parent.relative_to(root).as_posix()] += 1
    return counts


def ignored_directory_patterns(root: Path) -> list[str]:
    """The directory patterns of ``root/.gitignore`` (``build/``, ``*.egg-info/``,
    ``/.cluster/``), without their slashes; none when there is no such file."""
    try:
        lines = (root / ".gitignore").read_text().splitlines()
    except OSError:
        return []
    return [
        line.strip().strip("/")
        for line in lines
        if line.strip().endswith("/") and not line.startswith(("#", "!"))
    ]


def _matches(part: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(part, pattern) for pattern in patterns)


def oversized(counts: Counter[str], allowed: dict[str, int]) -> list[str]:
    """Each directory over ``MAX_MODULES`` beyond what ``allowed`` grants it, and each
    grant that is stale (its directory is within the limit now), sorted."""
    found = [
        f"{directory}: {n} modules (at most {allowed.get(directory, MAX_MODULES)})"
        for directory, n in counts.items()
        if n > max(MAX_MODULES, allowed.get(directory, 0))
    ]
    found += [
        f"{directory}: within the limit now ({counts[directory]} modules), drop it from "
        "OVER_THE_LIMIT"
        for directory in allowed
        if counts[directory] <= MAX_MODULES
    ]
    return sorted(found)


def test_the_rule_sees_a_crowded_directory_and_a_stale_grant(tmp_path: Path) -> None:
    """The check can fail: 21 modules in one directory are reported, 20 are not, a
    hidden directory is not counted, and a grant for a small directory is stale."""
    for directory, n in (("crowded", 21), ("full", 20), ("granted", 3), (".venv/x", 30)):
        (tmp_path / directory).mkdir(parents=True)
        for i in range(n):
            (tmp_path / directory / f"m{i}.py").write_text("")
    counts = modules_per_directory(tmp_path)
    assert ".venv/x" not in counts
    assert oversized(counts, {"granted": 25}) == [
        "crowded: 21 modules (at most 20)",
        "granted: within the limit now (3 modules), drop it from OVER_THE_LIMIT",
    ]


def test_no_directory_of_the_tree_holds_more_than_20_modules() -> None:
    found = oversized(modules_per_directory(REPO), OVER_THE_LIMIT)
    assert found == [], "split these into sub-packages:\n" + "\n".join(found)


def test_what_git_ignores_is_not_the_tree(tmp_path: Path) -> None:
    """A directory ``.gitignore`` ignores (a ``build/`` copy of the packages, as an image
    build leaves) is not the tree; a module beside it that is not ignored is counted."""
    (tmp_path / ".gitignore").write_text("# output\nbuild/\n*.log\n")
    for directory, n in (("build/lib/pkg", 30), ("pkg", 21)):
        (tmp_path / directory).mkdir(parents=True)
        for i in range(n):
            (tmp_path / directory / f"m{i}.py").write_text("")
    counts = modules_per_directory(tmp_path)
    assert "build/lib/pkg" not in counts
    assert oversized(counts, {}) == ["pkg: 21 modules (at most 20)"]
