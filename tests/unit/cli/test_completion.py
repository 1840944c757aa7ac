"""`icache completion bash|zsh|fish`: scripts generated from the live parser tree.

Bash is run for real (it is on every machine this project builds on): the script is
sourced and its function asked for completions, as bash asks on TAB. zsh and fish are
checked for what they must name, and parsed by the shell where it is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from icache_cli import completion
from icache_cli.main import SUBCOMMANDS, main


def _bash_complete(script: Path, words: list[str]) -> list[str]:
    """What the generated _icache puts in COMPREPLY for ``words`` (the last is the
    word being completed)."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        '_icache; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "icache.bash"
    path.write_text(completion.bash_script())
    return path


def test_the_completion_subcommand_prints_each_script(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for shell in completion.SHELLS:
        assert main(["completion", shell]) == 0
        assert "icache" in capsys.readouterr().out


@pytest.mark.services
def test_bash_completes_subcommands(bash_script: Path) -> None:
    assert set(_bash_complete(bash_script, ["icache", ""])) >= set(SUBCOMMANDS)
    assert _bash_complete(bash_script, ["icache", "admi"]) == ["admit-pod"]


@pytest.mark.services
def test_bash_completes_a_subcommands_flags(bash_script: Path) -> None:
    assert "--log-level" in _bash_complete(bash_script, ["icache", "webhook", "--log"])
    assert "--fail-on-unwired" not in _bash_complete(bash_script, ["icache", "webhook", "--"])


@pytest.mark.services
def test_bash_completes_choices_after_a_flag(bash_script: Path) -> None:
    assert _bash_complete(bash_script, ["icache", "worker", "--pool", ""]) == [
        "threads",
        "prefork",
        "solo",
    ]
    assert _bash_complete(bash_script, ["icache", "completion", "f"]) == ["fish"]


@pytest.mark.services
def test_bash_completes_file_names_for_a_path_flag(bash_script: Path, tmp_path: Path) -> None:
    (tmp_path / "kubeconfig-here").write_text("x")
    got = _bash_complete(bash_script, ["icache", "certs", "--kubeconfig", f"{tmp_path}/kube"])
    assert got == [f"{tmp_path}/kubeconfig-here"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_subcommand_and_flag(shell: str) -> None:
    script = completion.SCRIPTS[shell]()
    _, commands = completion.commands()
    for command in commands:
        assert command.name in script
        for flag in command.flags:
            long = next(n for n in flag.names if n.startswith("--"))
            token = long if shell == "zsh" else f"-l {long[2:]}"
            assert token in script, (command.name, long)
    assert "threads prefork solo" in script  # --pool's choices


@pytest.mark.parametrize("shell", ["zsh", "fish", "bash"])
@pytest.mark.services
def test_the_script_parses_in_its_shell_where_installed(shell: str, tmp_path: Path) -> None:
    """`-n`: read, do not run. A shell that is not installed cannot be asked."""
    path = tmp_path / f"icache.{shell}"
    path.write_text(completion.SCRIPTS[shell]())
    binary = shutil.which(shell)
    if binary is None:
        assert shell != "bash", "bash must be on the machine"
        return
    done = subprocess.run(
        [binary, "-n", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
