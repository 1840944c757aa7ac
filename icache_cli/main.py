"""`icache`: the one console script, with a subcommand per process and per tool.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their subcommand runs so that
`icache crd` does not pay for Celery or uvicorn, and so that an image without a
package (the webhook image has no ``icache_install``) still runs the rest.

The habits every subcommand gets from here, so its module only declares flags:

* no abbreviations (``--file`` is not ``--filename``), in every parser;
* every flag's help shows its default (:class:`DefaultsHelpFormatter`);
* the flags of a long-running process (``LONG_RUNNING``) can also be set by an
  environment variable, ``ICACHE_`` + the flag in upper case with ``_`` for ``-``
  (``--lease-seconds`` -> ``ICACHE_LEASE_SECONDS``; a flag whose module declares
  another name sets it as the action's ``declared_env``),
  named in its help; the command line wins over the environment;
* bad input — an unknown flag, a bad value, a missing or broken file, a bad
  kubeconfig, in a flag or in the environment — is one line on stderr saying what
  and where, exit code 2; a failure at run time is one line and exit code 1. No
  traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, Final, NamedTuple, NoReturn

from cli_support.habits import UsageError as UsageError


# Each subcommand's module is imported by a statement (so import-linter sees the console
# script's dependencies), inside a function (so it is imported only when its subcommand
# runs: `icache crd` does not pay for Celery or uvicorn).
def _crd() -> ModuleType:
    from icache_cli import crd

    return crd


def _webhook() -> ModuleType:
    from webhook_svc import webhook_cli

    return webhook_cli


def _admit_pod() -> ModuleType:
    from webhook_svc.offline import admit_pod_cli

    return admit_pod_cli


def _validate() -> ModuleType:
    from webhook_svc.offline import validate_cli

    return validate_cli


def _dispatcher() -> ModuleType:
    from reconciler.dispatch import dispatcher_cli

    return dispatcher_cli


def _worker() -> ModuleType:
    from reconciler.work import worker_cli

    return worker_cli


def _certs() -> ModuleType:
    from icache_install import certs_cli

    return certs_cli


def _manifests() -> ModuleType:
    from icache_install import manifests_cli

    return manifests_cli


def _doctor() -> ModuleType:
    from icache_install.doctor import cli

    return cli


def _completion() -> ModuleType:
    from icache_cli import completion

    return completion


def _webhook_preflight() -> ModuleType:
    from webhook_svc import preflight

    return preflight


class Subcommand(NamedTuple):
    """One `icache` subcommand: its module (``add_arguments(parser)``, ``run(args)``),
    its one-line help, the function importing that module (``load``; without one, a
    test's stand-in, importlib does) and, for a subcommand that forks, the function
    importing the module whose ``check(args)`` runs in the parent first."""

    module: str
    help: str
    load: Callable[[], ModuleType] | None = None
    preflight: Callable[[], ModuleType] | None = None


# Every subcommand, registered once: name -> Subcommand.
SUBCOMMANDS: dict[str, Subcommand] = {
    "crd": Subcommand("icache_cli.crd", "print the CacheBackend CRD YAML", _crd),
    "webhook": Subcommand(
        "webhook_svc.webhook_cli",
        "serve the CacheBackend and Pod admission webhooks",
        _webhook,
        preflight=_webhook_preflight,
    ),
    "admit-pod": Subcommand(
        "webhook_svc.offline.admit_pod_cli",
        "offline dry run: wire every Pod and workload of the input as the Pod webhook would",
        _admit_pod,
    ),
    "validate": Subcommand(
        "webhook_svc.offline.validate_cli",
        "offline: default and validate every CacheBackend of the input as admission would",
        _validate,
    ),
    "dispatcher": Subcommand(
        "reconciler.dispatch.dispatcher_cli",
        "watch CacheBackends and enqueue reconciles",
        _dispatcher,
    ),
    "worker": Subcommand("reconciler.work.worker_cli", "run a Celery reconcile worker", _worker),
    "certs": Subcommand(
        "icache_install.certs_cli", "generate webhook certificates and patch caBundle", _certs
    ),
    "manifests": Subcommand(
        "icache_install.manifests_cli", "print the install manifests", _manifests
    ),
    "doctor": Subcommand(
        "icache_install.doctor.cli",
        "read-only health check of the install, the CacheBackends and their engine pods",
        _doctor,
    ),
    "completion": Subcommand(
        "icache_cli.completion", "print a shell completion script (bash, zsh, fish)", _completion
    ),
}


def subcommand(name: str) -> Subcommand:
    """The registered subcommand ``name`` (a plain (module, help) pair a test registers
    is read as one without loaders)."""
    return Subcommand(*SUBCOMMANDS[name])


# The processes a Deployment runs: each of their flags has an environment variable.
LONG_RUNNING: Final = frozenset({"webhook", "dispatcher", "worker"})
ENV_PREFIX: Final = "ICACHE_"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


# --------------------------------------------------------------------- parsers


def _default_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, list | tuple):
        return ", ".join(_default_text(v) for v in value) if value else "none"
    return str(value)


# A help that states its default already: "(default: X)" or "(...; default: X)".
DEFAULT_NOTE: Final = re.compile(r"(\(|; )default: \S")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every flag's help ends with its default and, for a long-running process, its
    environment variable; a help that states its default already (``DEFAULT_NOTE``)
    keeps its own wording."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        notes = []
        if not DEFAULT_NOTE.search(text):
            notes.append(f"default: {_default_text(action.default)}")
        env = getattr(action, "env_var", None)
        if env:
            notes.append(f"env {env}")
        if notes:
            # Help strings are %-formatted by argparse: a literal % must be doubled.
            text += f" ({'; '.join(notes)})".replace("%", "%%")
        return text


class IcacheParser(argparse.ArgumentParser):
    """argparse with the habits of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace = namespace if namespace is not None else argparse.Namespace()
        for action in self._actions:
            env = getattr(action, "env_var", None)
            if env and env in os.environ and not hasattr(namespace, action.dest):
                setattr(namespace, action.dest, self._env_value(action, env, os.environ[env]))
                action.required = False
        return super().parse_known_args(args, namespace)

    def _env_value(self, action: argparse.Action, env: str, raw: str) -> Any:
        """The value ``raw`` (from the environment) gives the flag, converted and
        checked as if typed on the command line."""
        where = f"environment variable {env}={raw!r}"
        if action.nargs == 0:  # store_true / store_false / store_const
            word = raw.strip().lower()
            if word in _TRUE:
                return action.const
            if word in _FALSE:
                return action.default
            self.error(f"{where}: not a boolean (true/false, 1/0, yes/no, on/off)")
        try:
            if isinstance(action, argparse._AppendAction):
                return [self._converted(action, part.strip()) for part in raw.split(",")]
            return self._converted(action, raw)
        except argparse.ArgumentError as exc:
            self.error(f"{where}: {exc.message}")

    def _converted(self, action: argparse.Action, raw: str) -> Any:
        value = self._get_value(action, raw)
        self._check_value(action, value)
        return value


def env_name(action: argparse.Action) -> str | None:
    """The environment variable of a long-running process's flag (None: a flag with
    none, such as --help)."""
    longs = [o for o in action.option_strings if o.startswith("--")]
    if not longs or action.dest == "help" or action.default is argparse.SUPPRESS:
        return None
    declared: str | None = getattr(action, "declared_env", None)
    return declared or ENV_PREFIX + longs[0][2:].upper().replace("-", "_")


def bind_env(parser: argparse.ArgumentParser) -> None:
    """Give each flag of ``parser`` its environment variable (see the module docstring)."""
    for action in parser._actions:
        name = env_name(action)
        if name:
            action.env_var = name  # type: ignore[attr-defined]


class VersionAction(argparse.Action):
    """``--version``: computed when asked (the commit may need a git call)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version, git commit and build date, then exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from shared.build_info import build_info

        print(build_info().line())
        parser.exit(0)


def _add_debug(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="on an unexpected failure, print the Python traceback instead of one line "
        "(default: off)",
    )


def build_parser(
    wanted: str | None = None, *, load_all: bool = False
) -> tuple[IcacheParser, ModuleType | None, bool]:
    """The ``icache`` parser with the flags of subcommand ``wanted`` (of every
    subcommand with ``load_all``). Returns the parser, the wanted subcommand's module
    and False when that module's package is not installed here."""
    parser = IcacheParser(prog="icache", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=VersionAction)
    _add_debug(parser, False)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=IcacheParser
    )
    module: ModuleType | None = None
    installed = True
    for name, entry in SUBCOMMANDS.items():
        module_name, help_text = entry[0], entry[1]
        p = sub.add_parser(name, help=help_text, description=help_text)
        # SUPPRESS: `icache --debug webhook` must not be undone by the subparser's default.
        _add_debug(p, argparse.SUPPRESS)
        if name != wanted and not load_all:
            continue
        loaded = _load(name, module_name, quiet=load_all)
        if loaded is None:
            if name == wanted:
                installed = False
            continue
        loaded.add_arguments(p)
        if name in LONG_RUNNING:
            bind_env(p)
        if name == wanted:
            module = loaded
    return parser, module, installed


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``parser`` by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _first_positional(argv: Iterable[str]) -> str | None:
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


# The flags of `icache` itself, the only ones allowed before the subcommand.
TOP_LEVEL_FLAGS: Final = frozenset({"-h", "--help", "--version", "--debug"})


def _flag_before_subcommand(arguments: Sequence[str]) -> tuple[str, str | None] | None:
    """The first flag before the subcommand that is not one of icache's own, and the
    subcommand given after it (None: none given); None when there is no such flag."""
    flag: str | None = None
    for arg in arguments:
        if arg == "--":
            break
        if arg in SUBCOMMANDS:
            return (flag, arg) if flag else None
        if flag is None and arg.startswith("-") and arg.split("=", 1)[0] not in TOP_LEVEL_FLAGS:
            flag = arg.split("=", 1)[0]
    return (flag, None) if flag else None


def _misplaced_flag_message(flag: str, command: str | None) -> str:
    if command is None:
        return f"{flag} is not a flag of icache; a subcommand's flags go after it (icache --help)"
    module = _load(command, SUBCOMMANDS[command][0], quiet=True)
    flags = IcacheParser(prog=f"icache {command}")
    if module is not None:
        module.add_arguments(flags)
    if flag in flags._option_string_actions:
        return (
            f"{flag} is a flag of 'icache {command}': give it after the subcommand "
            f"(icache {command} {flag} ...)"
        )
    return f"{flag} is not a flag of icache or of 'icache {command}' (icache {command} --help)"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    misplaced = _flag_before_subcommand(arguments)
    if misplaced is not None:
        IcacheParser(prog="icache").error(_misplaced_flag_message(*misplaced))
    wanted = _first_positional(arguments)
    parser, module, installed = build_parser(wanted)
    if not installed:
        return EXIT_USAGE
    args = parser.parse_args(arguments)
    if module is None:  # unreachable: parse_args rejects an unknown subcommand
        return EXIT_USAGE
    return run_command(module, args)


# ------------------------------------------------------------------- failures


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def describe_failure(exc: BaseException) -> tuple[int, str]:
    """Exit code and one-line message of an exception a subcommand let through."""
    from kubeio.access import KubeConfigError

    if isinstance(exc, UsageError | KubeConfigError):
        return EXIT_USAGE, one_line(str(exc))
    if isinstance(exc, OSError) and exc.filename is not None:
        return EXIT_USAGE, one_line(f"{exc.filename}: {exc.strerror or exc}")
    unreachable = _unreachable(exc)
    if unreachable is not None:
        return EXIT_FAILURE, unreachable
    text = one_line(str(exc))
    return EXIT_FAILURE, f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _unreachable(exc: BaseException) -> str | None:
    """'cannot reach URL: why' for urllib3's give-up after its retries (the API server
    down or unresolvable), instead of the pool's repr; None for anything else."""
    try:
        from urllib3.exceptions import MaxRetryError
    except ImportError:
        return None
    if not isinstance(exc, MaxRetryError) or exc.pool is None:
        return None
    pool = exc.pool
    url = f"{pool.scheme}://{pool.host}" + (f":{pool.port}" if pool.port else "")
    reason = one_line(str(exc.reason or exc))
    # "HTTPSConnection(host=..., port=...): Failed to establish a new connection: [Errno
    # 111] Connection refused": without the connection's repr and urllib3's preamble.
    reason = re.sub(r"^.*?\): ", "", reason).removeprefix("Failed to establish a new connection: ")
    return f"cannot reach {url}: {reason}"


def run_command(module: ModuleType, args: argparse.Namespace) -> int:
    try:
        # Checks run in the parent before a subcommand's run(), for subcommands that fork.
        preflight = subcommand(args.command).preflight if args.command in SUBCOMMANDS else None
        if preflight is not None:
            preflight().check(args)
        rc: int = module.run(args)
    except KeyboardInterrupt:
        print(f"icache {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if getattr(args, "debug", False):
            raise
        code, text = describe_failure(exc)
        hint = " (--debug shows the traceback)" if code == EXIT_FAILURE else ""
        print(f"icache {args.command}: error: {text}{hint}", file=sys.stderr)
        return code
    return rc


def _load(name: str, module_name: str, *, quiet: bool = False) -> ModuleType | None:
    """The subcommand's module, or None (with one line on stderr unless ``quiet``)
    when its package is not installed here (``icache certs`` in the webhook image)."""
    load = subcommand(name).load if name in SUBCOMMANDS else None
    try:
        return load() if load is not None else importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        package = module_name.partition(".")[0]
        if exc.name not in (package, module_name):
            raise
        if not quiet:
            print(
                f"icache {name}: not installed here (no {package} package); "
                "the install tooling ships in the worker image",
                file=sys.stderr,
            )
        return None


if __name__ == "__main__":
    # `python -m icache_cli.main`: run the imported module, not this __main__ copy, so the
    # UsageError other modules raise is the class describe_failure knows.
    from icache_cli import main as cli

    sys.exit(cli.main())
