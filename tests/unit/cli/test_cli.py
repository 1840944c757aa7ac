"""`icache`: every subcommand docs/architecture.md "Contracts" names exists and parses its flags."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from icache_cli.main import SUBCOMMANDS, main


def test_contract_subcommands_are_registered() -> None:
    assert {"webhook", "dispatcher", "worker", "crd", "admit-pod"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_module_has_add_arguments_and_run(name: str) -> None:
    module = importlib.import_module(SUBCOMMANDS[name][0])
    assert callable(module.add_arguments)
    assert callable(module.run)


def test_crd_subcommand_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert "name: cachebackends.inferencecache.io" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["certs", "--help"], ["manifests"]])
def test_install_subcommand_without_its_package_says_where_it_ships(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The webhook image has no icache_install package; `icache
    certs` there must say so in one line, not crash with a traceback."""
    for name in [m for m in sys.modules if m.partition(".")[0] == "icache_install"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "icache_install", None)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"icache {argv[0]}: not installed here" in err
    assert "worker image" in err


def test_a_missing_dependency_inside_a_subcommand_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the subcommand's own package being absent is the friendly case: a
    dependency missing inside it is a real error with its traceback."""
    (tmp_path / "icache_broken_cmd.py").write_text("import icache_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(SUBCOMMANDS, "broken", ("icache_broken_cmd", "x"))
    with pytest.raises(ModuleNotFoundError):
        main(["broken"])
