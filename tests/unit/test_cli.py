"""`icache`: every subcommand the ARCHITECTURE contracts name exists and parses its flags."""

from __future__ import annotations

import importlib

import pytest

from shared.cli import SUBCOMMANDS, main


def test_contract_subcommands_are_registered() -> None:
    assert {"webhook", "dispatcher", "worker", "crd", "admit-pod"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_module_has_add_arguments_and_run(name: str) -> None:
    module = importlib.import_module(SUBCOMMANDS[name][0])
    assert callable(module.add_arguments) and callable(module.run)


def test_crd_subcommand_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert "name: cachebackends.inferencecache.io" in capsys.readouterr().out
