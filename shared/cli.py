"""`icache`: the one console script, with a subcommand per process and per tool.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their subcommand runs so that
`icache crd` does not pay for Celery or uvicorn, and so that an image without a
package (the webhook image has no ``icache_install``) still runs the rest.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

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
    "certs": ("icache_install.certs_cli", "generate webhook certificates and patch caBundle"),
    "manifests": ("icache_install.manifests_cli", "print the install manifests"),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icache", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wanted = (list(argv) if argv is not None else sys.argv[1:])[:1]
    module = None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if wanted == [name]:
            module = _load(name, module_name)
            if module is None:
                return 2
            module.add_arguments(p)
    args = parser.parse_args(argv)
    if module is None:
        module = _load(args.command, SUBCOMMANDS[args.command][0])
        if module is None:
            return 2
    from shared.kubeaccess import KubeConfigError

    try:
        rc: int = module.run(args)
    except KubeConfigError as exc:
        # Every process connects through shared.kubeaccess: one line, not a traceback.
        print(f"icache {args.command}: {exc}", file=sys.stderr)
        return 1
    return rc


def _load(name: str, module_name: str) -> ModuleType | None:
    """The subcommand's module, or None (with one line on stderr) when its package
    is not installed here (``icache certs`` in the webhook image)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        package = module_name.partition(".")[0]
        if exc.name not in (package, module_name):
            raise
        print(
            f"icache {name}: not installed here (no {package} package); "
            "the install tooling ships in the worker image",
            file=sys.stderr,
        )
        return None


if __name__ == "__main__":
    sys.exit(main())
