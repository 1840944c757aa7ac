"""The habits of every `icache` subcommand (icache_cli/main.py): no abbreviations, help and
default on every flag, an ICACHE_* variable for every flag of a long-running process,
one-line errors with exit code 2, --version."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from icache_cli import main as cli
from icache_cli.main import LONG_RUNNING, DefaultsHelpFormatter, build_parser, main, subparsers
from shared.build_info import build_info

PARSER = build_parser(load_all=True)[0]
SUBPARSERS = subparsers(PARSER)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def _help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = DefaultsHelpFormatter(parser.prog)
    text = formatter._get_help_string(action) or ""
    return text % {**vars(action), "prog": parser.prog}


def test_every_subcommand_is_in_the_tree() -> None:
    assert set(SUBPARSERS) == set(cli.SUBCOMMANDS)


# "(default: X)" or "(...; default: X)": the default as a note, not the word anywhere.
DEFAULT_NOTE = re.compile(r"(\(|; )default: \S")


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_every_flag_has_help_that_shows_its_default(name: str) -> None:
    """CLI habit: every flag has help text and shows its default. A flag that takes
    no value (on/off) says it is off by default."""
    parser = SUBPARSERS[name]
    for action in _options(parser):
        text = _help_of(parser, action)
        where = f"icache {name} {action.option_strings}: {text!r}"
        assert action.help, where
        if action.nargs == 0 and action.default is argparse.SUPPRESS:
            continue  # --version: an action, not a setting
        assert DEFAULT_NOTE.search(text), where


def test_a_help_that_mentions_default_in_passing_still_gets_its_default() -> None:
    parser = cli.IcacheParser(prog="t")
    action = parser.add_argument("--pool", default="threads", help="threads by default")
    assert _help_of(parser, action) == "threads by default (default: threads)"


@pytest.mark.parametrize("name", sorted(LONG_RUNNING))
def test_every_flag_of_a_long_running_process_names_its_environment_variable(name: str) -> None:
    parser = SUBPARSERS[name]
    for action in _options(parser):
        if action.dest == "debug":
            continue
        text = _help_of(parser, action)
        named = re.findall(r"env (ICACHE_[A-Z0-9_]+)\)$", text)
        assert named, f"icache {name} {action.option_strings}: {text!r}"
        assert named[-1] == cli.env_name(action)


def test_no_parser_accepts_abbreviations() -> None:
    assert PARSER.allow_abbrev is False
    for name, parser in SUBPARSERS.items():
        assert parser.allow_abbrev is False, name


def test_an_abbreviated_flag_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    """`--names` is not `--namespace` (argparse would take it by default)."""
    with pytest.raises(SystemExit) as info:
        main(["admit-pod", "-f", "-", "--backends-from", ".", "--names", "team-a"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --names" in err
    assert len(err.strip().splitlines()) == 1


def test_an_environment_variable_sets_a_flag_and_the_command_line_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ICACHE_LEASE_SECONDS", "7.5")
    monkeypatch.setenv("ICACHE_CONCURRENCY", "9")
    parser, _, _ = build_parser("worker")
    args = parser.parse_args(["worker"])
    assert (args.lease_seconds, args.concurrency) == (7.5, 9)
    assert parser.parse_args(["worker", "--concurrency", "2"]).concurrency == 2


def test_a_boolean_flag_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICACHE_INSECURE", "true")
    parser, _, _ = build_parser("webhook")
    assert parser.parse_args(["webhook"]).insecure is True
    monkeypatch.setenv("ICACHE_INSECURE", "0")
    parser, _, _ = build_parser("webhook")
    assert parser.parse_args(["webhook"]).insecure is False


def test_the_webhook_worker_count_keeps_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICACHE_WEBHOOK_WORKERS", "3")
    parser, _, _ = build_parser("webhook")
    assert parser.parse_args(["webhook"]).workers == 3


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("ICACHE_PORT", "abc", "'abc' is not an integer"),
        ("ICACHE_LOG_LEVEL", "LOUD", "invalid log level 'LOUD'"),
        ("ICACHE_INSECURE", "maybe", "not a boolean"),
    ],
)
def test_a_bad_environment_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    words: str,
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as info:
        main(["webhook", "--insecure"] if variable != "ICACHE_INSECURE" else ["webhook"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"environment variable {variable}={value!r}" in err
    assert words in err


def test_help_never_shows_a_redis_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ICACHE_REDIS_PASSWORD", "s3cret")
    monkeypatch.setenv("ICACHE_REDIS_URL", "redis://:s3cret@r:6379/0")
    parser, _, _ = build_parser("dispatcher")
    assert "s3cret" not in subparsers(parser)["dispatcher"].format_help()


def test_version_names_version_commit_and_build_date(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICACHE_BUILD_COMMIT", "0123abcd")
    monkeypatch.setenv("ICACHE_BUILD_DATE", "2026-01-02T03:04:05Z")
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == (f"icache {build_info().version} (commit 0123abcd, built 2026-01-02T03:04:05Z)")
    assert build_info().version != "unknown"


def test_version_without_a_stamp_says_what_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ICACHE_BUILD_COMMIT", raising=False)
    monkeypatch.delenv("ICACHE_BUILD_DATE", raising=False)
    monkeypatch.setattr("shared.build_info.checkout_commit", lambda: None)
    assert build_info().line().endswith("(commit unknown, built unknown)")


def test_debug_before_or_after_the_subcommand(monkeypatch: pytest.MonkeyPatch) -> None:
    for argv in (["--debug", "crd"], ["crd", "--debug"]):
        parser, _, _ = build_parser("crd")
        assert parser.parse_args(argv).debug is True
    parser, _, _ = build_parser("crd")
    assert parser.parse_args(["crd"]).debug is False


def test_a_run_time_failure_is_one_line_and_exit_1_unless_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import icache_cli.crd

    def boom(_args: argparse.Namespace) -> int:
        raise RuntimeError("the disk is\nfull")

    monkeypatch.setattr(icache_cli.crd, "run", boom)
    assert main(["crd"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "icache crd: error: RuntimeError: the disk is full (--debug shows the traceback)"
    with pytest.raises(RuntimeError):
        main(["--debug", "crd"])


@pytest.mark.services
def test_python_m_shared_cli_has_no_traceback_on_a_bad_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "icache_cli.main", "manifests", "--namespace", "Bad_NS"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "invalid namespace 'Bad_NS'" in done.stderr
    assert done.stdout == ""


def test_the_images_carry_the_build_stamp_version_reads() -> None:
    """`make images` passes the commit and date; each runtime stage exports them."""
    from tests.samples import ROOT

    for name in ("Dockerfile.webhook", "Dockerfile.worker"):
        runtime = (ROOT / name).read_text().rsplit("\nFROM ", 1)[1]
        for variable in ("ICACHE_BUILD_COMMIT", "ICACHE_BUILD_DATE"):
            assert f'ARG {variable}=""' in runtime, (name, variable)
            assert f"{variable}=${variable}" in runtime, (name, variable)
    makefile = (ROOT / "Makefile").read_text()
    assert "--build-arg ICACHE_BUILD_COMMIT=" in makefile


@pytest.mark.parametrize(("given", "parsed"), [("table", "table"), ("text", "table")])
def test_doctor_output_is_table_or_json_with_text_as_an_alias(given: str, parsed: str) -> None:
    """The issue's `icache doctor -o table|json`; `text`, its first name, still works."""
    parser, _, _ = build_parser("doctor")
    assert parser.parse_args(["doctor", "-o", given]).output == parsed
    assert parser.parse_args(["doctor"]).output == "table"
    assert parser.parse_args(["doctor", "-o", "json"]).output == "json"


def test_an_unreachable_server_is_described_by_url_and_reason() -> None:
    """A run-time failure (exit 1) said in words, not as urllib3's pool repr."""
    import urllib3

    def failure(url: str) -> tuple[int, str]:
        with pytest.raises(urllib3.exceptions.MaxRetryError) as info:
            urllib3.PoolManager(retries=urllib3.Retry(0)).request("GET", url)
        return cli.describe_failure(info.value)

    assert failure("https://127.0.0.1:1/x") == (
        1,
        "cannot reach https://127.0.0.1:1: [Errno 111] Connection refused",
    )
    code, text = failure("https://no-such-host.invalid/x")
    assert code == 1
    # The resolver's own words vary (no DNS at all, or NXDOMAIN); their brackets balance.
    assert text.startswith(
        "cannot reach https://no-such-host.invalid:443: Failed to resolve 'no-such-host.invalid' ("
    )
    assert text.endswith(")")
