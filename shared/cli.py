"""`icache`: the one console script, with a subcommand per process and per tool.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their subcommand runs so that
`icache crd` does not pay for Celery or uvicorn.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crd": ("shared.crd_cli", "print the CacheBackend CRD YAML"),
    "webhook": ("webhook_svc.serve", "serve the CacheBackend and Pod admission webhooks"),
    "admit-pod": (
        "webhook_svc.dry_run",
        "offline dry run: wire a Pod/Deployment/StatefulSet against backends in a directory",
    ),
    "dispatcher": ("reconciler.dispatcher_cli", "watch CacheBackends and enqueue reconciles"),
    "worker": ("reconciler.worker_cli", "run a Celery reconcile worker"),
    "certs": ("shared.certs_cli", "generate webhook certificates and patch caBundle"),
    "manifests": ("shared.manifests_cli", "print the install manifests"),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icache", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wanted = (list(argv) if argv is not None else sys.argv[1:])[:1]
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if wanted == [name]:
            importlib.import_module(module_name).add_arguments(p)
    args = parser.parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    rc: int = module.run(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
