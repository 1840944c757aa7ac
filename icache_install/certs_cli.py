"""`icache certs`: webhook certificates without cert-manager.

Reads the two Secrets (the kubernetes.io/tls Secret the webhook pods mount, and an
Opaque Secret holding the CA key, which no pod mounts), decides what to keep with
:func:`icache_install.certs.plan`, writes back only what changed, and patches ``caBundle``
into every webhook of both webhook configurations. Safe to re-run at any time (a
CronJob or a person can run it for rotation); a run that changes nothing writes
nothing.

``--url-base https://127.0.0.1:PORT`` points the configurations at a URL instead of
the Service (local development and tests); ``--output-dir`` also writes the files
``icache webhook --tls-cert-file/--tls-key-file`` reads.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cli_support import arg_types as cli_types
from cli_support.habits import quiet_client_libraries
from icache_install import certs, redis_auth
from kubeio import access as kubeaccess
from kubeio import client as kc
from kubeio.client import KubeClient
from shared import constants as c
from shared.constants import INSTALL_NAMESPACE
from shared.objects import meta, metadata

log = logging.getLogger("icache.certs")

DEFAULT_SERVICE = c.WEBHOOK_SERVICE
DEFAULT_SECRET = c.WEBHOOK_TLS_SECRET
DEFAULT_MUTATING_CONFIG = c.MUTATING_WEBHOOK_CONFIGURATION
DEFAULT_VALIDATING_CONFIG = c.VALIDATING_WEBHOOK_CONFIGURATION


class CertsError(Exception):
    """A failure worth one line on stderr and exit code 1."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        type=cli_types.dns_label,
        default=INSTALL_NAMESPACE,
        help="namespace of the webhook",
    )
    parser.add_argument(
        "--service",
        type=cli_types.dns_label,
        default=DEFAULT_SERVICE,
        help="webhook Service (its DNS names are the hosts)",
    )
    parser.add_argument(
        "--secret",
        type=cli_types.dns_subdomain,
        default=DEFAULT_SECRET,
        help="kubernetes.io/tls Secret the webhook mounts",
    )
    parser.add_argument(
        "--ca-secret",
        type=cli_types.dns_subdomain,
        help="Secret holding the CA key (default: <--secret>-ca; no pod mounts it)",
    )
    kubeaccess.add_kubeconfig_argument(parser)
    parser.add_argument(
        "--context",
        help="kubeconfig context (default: the kubeconfig's current context; naming one skips "
        "the in-cluster ServiceAccount)",
    )
    parser.add_argument(
        "--days",
        type=cli_types.positive_int,
        default=certs.DEFAULT_SERVING_DAYS,
        help="validity of a newly issued serving certificate (default: %(default)s)",
    )
    parser.add_argument(
        "--ca-days",
        type=cli_types.positive_int,
        default=certs.DEFAULT_CA_DAYS,
        help="validity of a newly created CA (default: %(default)s)",
    )
    parser.add_argument(
        "--rotate-ca",
        action="store_true",
        help="create a new CA even if the stored one is good (default: off)",
    )
    parser.add_argument(
        "--drop-previous-ca",
        action="store_true",
        help="stop trusting the CA replaced by the last rotation (after pods picked up the "
        "new one; default: off)",
    )
    parser.add_argument(
        "--renew",
        action="store_true",
        help="re-issue the serving certificate even if it is good (default: off)",
    )
    parser.add_argument(
        "--renew-before",
        type=duration,
        metavar="DURATION",
        help="renew the serving certificate and the CA once they expire within DURATION "
        "(e.g. 720h, 30d; default: 30 days, or a third of the lifetime when shorter). "
        "A run outside the window writes nothing, so a CronJob can run this daily",
    )
    parser.add_argument(
        "--mutating-config",
        type=cli_types.optional_dns_subdomain,
        default=DEFAULT_MUTATING_CONFIG,
        help="MutatingWebhookConfiguration to patch ('' to skip; default: %(default)s)",
    )
    parser.add_argument(
        "--validating-config",
        type=cli_types.optional_dns_subdomain,
        default=DEFAULT_VALIDATING_CONFIG,
        help="ValidatingWebhookConfiguration to patch ('' to skip; default: %(default)s)",
    )
    parser.add_argument(
        "--redis-secret",
        type=cli_types.optional_dns_subdomain,
        default=redis_auth.DEFAULT_SECRET,
        help="Secret with the bundled Redis's password: created with a random one when "
        "missing, never changed ('' to skip; default: %(default)s)",
    )
    parser.add_argument(
        "--url-base",
        type=cli_types.checked(certs.normalise_url_base),
        metavar="URL",
        help="point the webhook configurations at https://HOST:PORT instead of the Service "
        "(default: unset, the Service)",
    )
    parser.add_argument(
        "--hosts",
        action="append",
        help="hosts (DNS names or IPs) of the serving certificate, comma-separated or repeated "
        "(default: the Service DNS names, or the host of --url-base)",
    )
    parser.add_argument(
        "--cluster-domain",
        type=cli_types.dns_subdomain,
        default="cluster.local",
        help="cluster DNS domain (default: %(default)s)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="also write tls.crt, tls.key and ca.crt here, for a local `icache webhook` "
        "(default: unset, no files)",
    )


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def duration(text: str) -> dt.timedelta:
    """``30d``, ``720h``, ``1d12h``...: a positive duration (argparse type)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"not a duration like 720h or 30d: {text!r}")
    seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"the duration must be positive: {text!r}")
    return dt.timedelta(seconds=seconds)


def resolve_hosts(args: argparse.Namespace) -> list[str]:
    if args.hosts:
        hosts = [h.strip() for entry in args.hosts for h in entry.split(",") if h.strip()]
        if not hosts:
            raise CertsError("--hosts is empty")
        return list(dict.fromkeys(hosts))
    if args.url_base:
        return [certs.url_host(args.url_base)]
    return certs.service_hosts(args.service, args.namespace, args.cluster_domain)


class Cluster:
    """The handful of API calls the command makes, dict in, dict out, over the
    shared client (:class:`kubeio.client.KubeClient`)."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._kube.get_or_none(kc.SECRETS, namespace, name)

    def write_secret(
        self, namespace: str, current: dict[str, Any] | None, body: dict[str, Any]
    ) -> None:
        if current is None:
            self._kube.create(kc.SECRETS, namespace, body)
            return
        # resourceVersion makes a concurrent writer fail with 409 instead of being lost.
        metadata(body)["resourceVersion"] = meta(current).resource_version
        self._kube.replace(kc.SECRETS, namespace, meta(body).name, body)

    def read_webhook_config(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._kube.get_or_none(kc.BY_KIND[kind], None, name)

    def patch_webhook_config(self, kind: str, name: str, ops: list[dict[str, Any]]) -> None:
        self._kube.patch(kc.BY_KIND[kind], None, name, ops, content_type=kc.JSON_PATCH)


def _secret_body(
    name: str, namespace: str, type_: str, data: dict[str, str], current: dict[str, Any] | None
) -> dict[str, Any]:
    current_meta = meta(current)
    labels = {**current_meta.labels, **redis_auth.CERTS_MANAGED_BY_LABELS}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "type": type_,
        "data": data,
    }
    if current_meta.annotations:
        metadata(body)["annotations"] = current_meta.annotations
    return body


def _needs_write(current: dict[str, Any] | None, type_: str, data: dict[str, str]) -> bool:
    if current is None:
        return True
    if current.get("type") != type_:
        raise CertsError(
            f"Secret {meta(current).name} has type {current.get('type')}, expected "
            f"{type_}; delete it or pass another name"
        )
    return bool(current.get("data") != data)


def write_output_dir(directory: Path, state: certs.CertState) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / certs.TLS_CERT).write_bytes(state.serving.cert_pem)
    key_path = directory / certs.TLS_KEY
    key_path.touch(mode=0o600)
    key_path.chmod(0o600)
    key_path.write_bytes(state.serving.key_pem)
    (directory / certs.CA_CERT).write_bytes(certs.ca_bundle(state))


def reconcile(
    cluster: Cluster, args: argparse.Namespace, now: dt.datetime
) -> tuple[certs.Plan, list[str]]:
    """Bring the Secrets and webhook configurations up to date; returns the plan and
    the configurations that were patched."""
    namespace = args.namespace
    ca_secret_name = args.ca_secret or f"{args.secret}-ca"
    url_base = certs.normalise_url_base(args.url_base) if args.url_base else None
    hosts = resolve_hosts(args)

    log.info("reading Secrets %s/%s and %s/%s", namespace, args.secret, namespace, ca_secret_name)
    tls_secret = cluster.read_secret(namespace, args.secret)
    ca_secret = cluster.read_secret(namespace, ca_secret_name)
    the_plan = _plan(args, tls_secret, ca_secret, hosts, now)

    # The CA first: a crash between the writes must not leave a serving certificate
    # whose CA key is lost.
    _write_secret_if_changed(
        cluster,
        namespace,
        ca_secret_name,
        "Opaque",
        certs.ca_secret_data(the_plan.state),
        ca_secret,
    )
    if args.redis_secret and redis_auth.ensure_password_secret(
        cluster, namespace, args.redis_secret
    ):
        log.info("wrote Secret %s/%s (a new random Redis password)", namespace, args.redis_secret)

    patched, missing = _patch_webhook_configs(
        cluster, args, certs.ca_bundle(the_plan.state), url_base
    )

    # The serving certificate last: caBundle trusts the CA that signed it before any
    # pod can load it (a pod still serving the previous one stays trusted through the
    # previous CA kept in the bundle).
    tls_data = certs.tls_secret_data(the_plan.state)
    _write_secret_if_changed(
        cluster, namespace, args.secret, "kubernetes.io/tls", tls_data, tls_secret
    )

    if args.output_dir:
        write_output_dir(args.output_dir, the_plan.state)
        log.info("wrote tls.crt, tls.key, ca.crt to %s", args.output_dir)
    if missing:
        raise CertsError(
            f"not found: {', '.join(missing)}; the Secrets are written — apply the manifests "
            "and run this again to patch caBundle"
        )
    return the_plan, patched


def _plan(
    args: argparse.Namespace,
    tls_secret: dict[str, Any] | None,
    ca_secret: dict[str, Any] | None,
    hosts: list[str],
    now: dt.datetime,
) -> certs.Plan:
    """What to keep and what to renew, from the two Secrets as read and the flags;
    logs the verdict for each part."""
    ca_data = (ca_secret or {}).get("data")
    log.info("checking the CA and the serving certificate for %s", ", ".join(hosts))
    the_plan = certs.plan(
        ca=certs.pair_from_secret_data(ca_data, certs.CA_CERT, certs.CA_KEY),
        serving=certs.pair_from_secret_data(
            (tls_secret or {}).get("data"), certs.TLS_CERT, certs.TLS_KEY
        ),
        previous_ca_pem=certs.previous_ca_from_secret_data(ca_data),
        hosts=hosts,
        now=now,
        rotate_ca=args.rotate_ca,
        renew=args.renew,
        drop_previous_ca=args.drop_previous_ca,
        days=args.days,
        ca_days=args.ca_days,
        renew_within=args.renew_before,
    )
    for part, reason in (
        ("CA", the_plan.ca_reason),
        ("serving certificate", the_plan.serving_reason),
        ("CA bundle", the_plan.previous_ca_reason),
    ):
        log.info("%s: %s", part, f"renewed ({reason})" if reason else "kept")
    return the_plan


def _write_secret_if_changed(
    cluster: Cluster,
    namespace: str,
    name: str,
    type_: str,
    data: dict[str, str],
    current: dict[str, Any] | None,
) -> None:
    """Write Secret ``name`` with ``data`` unless ``current`` (as read) already holds it."""
    if _needs_write(current, type_, data):
        cluster.write_secret(
            namespace, current, _secret_body(name, namespace, type_, data, current)
        )
        log.info("wrote Secret %s/%s", namespace, name)


def _patch_webhook_configs(
    cluster: Cluster, args: argparse.Namespace, bundle: bytes, url_base: str | None
) -> tuple[list[str], list[str]]:
    """Patch ``caBundle`` (and the URLs with ``--url-base``) into both webhook
    configurations; returns the ones patched and the ones not found."""
    patched: list[str] = []
    missing: list[str] = []
    for kind, name in (
        ("MutatingWebhookConfiguration", args.mutating_config),
        ("ValidatingWebhookConfiguration", args.validating_config),
    ):
        if not name:
            continue
        log.info("checking caBundle of %s %s", kind, name)
        config = cluster.read_webhook_config(kind, name)
        if config is None:
            missing.append(f"{kind} {name}")
            continue
        ops = certs.webhook_patch(config, bundle, url_base)
        if ops:
            cluster.patch_webhook_config(kind, name, ops)
            patched.append(f"{kind} {name}")
            log.info("patched %s %s (%d webhooks)", kind, name, len(ops) // 2)
        else:
            log.info("%s %s already up to date", kind, name)
    return patched, missing


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="icache certs: %(message)s", stream=sys.stderr)
    quiet_client_libraries()
    try:
        if args.days < 1 or args.ca_days < 1:
            raise CertsError("--days and --ca-days must be at least 1")
        window = args.renew_before
        if window is not None and window >= dt.timedelta(days=min(args.days, args.ca_days)):
            # A certificate issued now would be due again at once: every run would rotate.
            raise CertsError("--renew-before must be shorter than --days and --ca-days")
        kube = kubeaccess.connect(args.kubeconfig, context=args.context)
        log.info("connected to %s", kube.api_client.configuration.host)
        try:
            reconcile(Cluster(kube), args, dt.datetime.now(dt.UTC))
        finally:
            kube.close()
    except kubeaccess.KubeConfigError as exc:
        log.error("%s", exc)
        return 2
    except (CertsError, redis_auth.RedisAuthError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    except kc.ApiError as exc:
        log.error("API server said %s %s: %s", exc.status, exc.reason, exc.body.strip())
        return 1
    return 0


def parse_and_run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icache certs", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(parse_and_run())
