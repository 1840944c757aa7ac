"""The pre-commit hooks run exactly the checks of `make lint`.

Both lists are read from their files (the Makefile's lint recipe, the local hooks of
.pre-commit-config.yaml) so adding a check to one and not the other fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def make_lint_commands() -> list[str]:
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    return [
        f".venv/bin/{m.group(1).strip()}"
        for m in re.finditer(r"\$\(VENV\)/bin/([^|;\\]+?)\s*\|\|", recipe)
    ]


def precommit_commands() -> list[str]:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    assert all(repo["repo"] == "local" for repo in config["repos"]), "no network fetch"
    assert all(h["language"] == "system" and h["pass_filenames"] is False for h in hooks)
    return [str(h["entry"]) for h in hooks]


def test_make_lint_recipe_is_parsed() -> None:
    commands = make_lint_commands()
    assert ".venv/bin/ruff check ." in commands, commands
    assert len(commands) >= 4, commands


def test_precommit_runs_the_make_lint_checks() -> None:
    assert sorted(precommit_commands()) == sorted(make_lint_commands())
