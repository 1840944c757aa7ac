"""`icache doctor`: read-only checks of the install, the CacheBackends and their engine pods.

    icache doctor [--namespace NS | -A] [-o table|json] [--kubeconfig F] [--context C]
                  [--prometheus URL]

It only ever GETs (icache_install/doctor/reader.py has no other verb). Every finding
has a stable code, a severity, the object and a next step (docs/doctor.md). Exit code
1 when any finding is an error, 0 otherwise; 2 for bad input (a bad kubeconfig).
"""

from __future__ import annotations

import argparse
import os
import sys

from cli_support import arg_types as cli_types
from cli_support.habits import quiet_client_libraries
from icache_install.doctor.diagnose import Scope, diagnose
from icache_install.doctor.engine_metrics import check_prometheus
from icache_install.doctor.findings import Severity
from icache_install.doctor.install import InstallNames
from icache_install.doctor.reader import ClusterReader
from icache_install.doctor.render import json_report, text_report
from kubeio import access as kubeaccess
from shared.constants import INSTALL_NAMESPACE

DEFAULTS = InstallNames()
OUTPUTS = ("table", "json")
# Earlier spellings of an output format, still accepted.
OUTPUT_ALIASES = {"text": "table"}


def output_format(value: str) -> str:
    return OUTPUT_ALIASES.get(value, value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-n",
        "--namespace",
        type=cli_types.dns_label,
        help="check the CacheBackends and engine pods of this namespace (default: the "
        "kubeconfig context's namespace, else default)",
    )
    where.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="check every namespace (default: off)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=output_format,
        choices=OUTPUTS,
        default="table",
        help="table: like kubectl describe ('text' is an alias); json: the report of "
        "docs/doctor.md",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="table output: show info findings too (wired pods, healthy conditions; default: off)",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the table output: auto colours on a terminal unless NO_COLOR is set",
    )
    parser.add_argument(
        "--prometheus",
        type=cli_types.http_url,
        metavar="URL",
        help="also read the engines' own KV-tier series from this Prometheus (its base "
        "URL, e.g. http://prometheus-operated.monitoring:9090; no other address is "
        "contacted) and report zero hits, remote-tier errors and unhealthy LMCache "
        "(default: off)",
    )
    kubeaccess.add_kubeconfig_argument(parser)
    parser.add_argument(
        "--context",
        help="kubeconfig context (default: the kubeconfig's current context)",
    )
    parser.add_argument(
        "--install-namespace",
        type=cli_types.dns_label,
        default=INSTALL_NAMESPACE,
        metavar="NAMESPACE",
        help="namespace of the webhook, dispatcher, worker and Redis",
    )
    parser.add_argument(
        "--mutating-config",
        type=cli_types.dns_subdomain,
        default=DEFAULTS.mutating_config,
        metavar="NAME",
        help="MutatingWebhookConfiguration of the install",
    )
    parser.add_argument(
        "--validating-config",
        type=cli_types.dns_subdomain,
        default=DEFAULTS.validating_config,
        metavar="NAME",
        help="ValidatingWebhookConfiguration of the install",
    )
    parser.add_argument(
        "--redis-secret",
        type=cli_types.optional_dns_subdomain,
        default=DEFAULTS.redis_secret,
        metavar="NAME",
        help="Secret with the bundled Redis's password ('' for an external Redis without one)",
    )
    parser.add_argument(
        "--tls-secret",
        type=cli_types.dns_subdomain,
        default=DEFAULTS.tls_secret,
        metavar="NAME",
        help="the webhook's kubernetes.io/tls Secret (icache certs --secret)",
    )
    parser.add_argument(
        "--lease-name",
        type=cli_types.dns_subdomain,
        default=DEFAULTS.lease,
        metavar="NAME",
        help="the dispatcher's leader-election Lease (icache dispatcher --lease-name)",
    )
    for role, default in (
        ("webhook", DEFAULTS.webhook_deployment),
        ("dispatcher", DEFAULTS.dispatcher_deployment),
        ("worker", DEFAULTS.worker_deployment),
    ):
        parser.add_argument(
            f"--{role}-deployment",
            type=cli_types.dns_subdomain,
            default=default,
            metavar="NAME",
            help=f"the {role} Deployment of the install",
        )


def install_names(args: argparse.Namespace) -> InstallNames:
    """Where the install's objects are, from the flags."""
    return InstallNames(
        namespace=args.install_namespace,
        mutating_config=args.mutating_config,
        validating_config=args.validating_config,
        tls_secret=args.tls_secret,
        redis_secret=args.redis_secret,
        lease=args.lease_name,
        webhook_deployment=args.webhook_deployment,
        dispatcher_deployment=args.dispatcher_deployment,
        worker_deployment=args.worker_deployment,
    )


def use_colour(choice: str) -> bool:
    if choice != "auto":
        return choice == "always"
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def run(args: argparse.Namespace) -> int:
    quiet_client_libraries()
    namespace = (
        None
        if args.all_namespaces
        else (args.namespace or kubeaccess.context_namespace(args.kubeconfig, args.context))
    )
    names = install_names(args)
    kube = kubeaccess.connect(args.kubeconfig, context=args.context, timeout=15.0)
    try:
        reader = ClusterReader(kube)
        result = diagnose(reader, Scope(namespace, names))
    finally:
        kube.close()
    if args.prometheus:
        result.findings.extend(check_prometheus(args.prometheus, result.backends, namespace))
    if args.output == "json":
        sys.stdout.write(
            json_report(
                result.findings,
                server=reader.server,
                namespace=namespace,
                install_namespace=names.namespace,
                pods_checked=result.pods_checked,
                backends=len(result.backends),
            )
        )
    else:
        sys.stdout.write(
            text_report(
                result.findings,
                server=reader.server,
                scope=f"namespace {namespace}" if namespace else "all namespaces",
                install_namespace=names.namespace,
                pods_checked=result.pods_checked,
                backends=len(result.backends),
                colour=use_colour(args.color),
                verbose=args.verbose,
            )
        )
    return 1 if any(f.severity == Severity.ERROR for f in result.findings) else 0
