"""`icache webhook`: serve the admission webhooks under uvicorn.

TLS comes from --tls-cert-file/--tls-key-file and is reloaded when the files change
(cert-manager or `icache certs` rotates them): see webhook_svc/http/tls.py. --insecure serves
plain HTTP for local replay with curl.
"""

from __future__ import annotations

import argparse
import functools
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cli_support import arg_types as cli_types
from kubeio import access as kubeaccess
from shared import jsonlog
from shared.runtime_adapters.base import InjectContext
from webhook_svc.backend_source import (
    DEFAULT_LIST_TIMEOUT_SECONDS,
    ApiBackendSource,
    BackendSource,
    FileBackendSource,
)
from webhook_svc.http.admission_gate import (
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
)
from webhook_svc.http.serving import (
    DEFAULT_HEAD_TIMEOUT_SECONDS,
    DEFAULT_KEEP_ALIVE_SECONDS,
)

if TYPE_CHECKING:
    from kubeio.async_client import ApiServer
    from webhook_svc.workload_authz import AccessReviewer
from webhook_svc.http.uvicorn_processes import (
    available_cpus,
    bind,
    fork_workers,
    share_metrics_between_workers,
)

log = logging.getLogger("icache.webhook")

# How long the privilege guard reuses an allowed SubjectAccessReview answer by default
# (docs/decisions.md, "Engine-shaping needs engine-level permission"): a revoked
# permission still works for at most this long, against kube-apiserver's own 5 minutes
# for its webhook authorizer. Denied answers are not kept by default, so a grant
# applies to the next write.
DEFAULT_ACCESS_REVIEW_ALLOWED_TTL: Final = 10.0


@dataclass(frozen=True)
class WebhookFlag:
    """How one setting of `icache webhook` is typed on the command line. The flag is
    ``--`` + the setting's name with ``-`` for ``_``, its default the setting's; its
    environment variable is the console script's rule (``ICACHE_`` + the flag) unless
    ``env`` names another. ``add`` stands in for all of it where the flag is shared
    with other commands (``--kubeconfig``)."""

    help: str = ""
    # The argument type, by its name in cli_support/arg_types.py: looked up when the
    # parser is built, as a direct reference in add_argument would be.
    type: str | None = None
    metavar: str | None = None
    action: str | None = None
    env: str | None = None
    add: Callable[[argparse.ArgumentParser], object] | None = None


def flag(**spec: Any) -> dict[str, WebhookFlag]:
    """The metadata of a setting declared with its flag (``WebhookFlag``): the one
    declaration of both."""
    return {"flag": WebhookFlag(**spec)}


@dataclass(frozen=True)
class WebhookSettings:
    """Every flag of `icache webhook`, as its logic receives them, each declared once
    here: ``add_arguments`` and ``settings_from`` read these fields. Plain values: a
    forked worker inherits them as they are."""

    host: str | None = field(
        default=None,
        metadata=flag(
            help="address to listen on (default: 0.0.0.0 with TLS, 127.0.0.1 with --insecure; "
            "'::' for IPv6)"
        ),
    )
    port: int = field(default=8443, metadata=flag(type="port", help="port to listen on"))
    insecure: bool = field(
        default=False,
        metadata=flag(action="store_true", help="serve plain HTTP (local replay, no TLS)"),
    )
    tls_cert_file: Path | None = field(
        default=None,
        metadata=flag(
            type="pem_certificate_file",
            metavar="PATH",
            help="serving certificate (PEM); required unless --insecure",
        ),
    )
    tls_key_file: Path | None = field(
        default=None,
        metadata=flag(
            type="pem_key_file",
            metavar="PATH",
            help="serving key (PEM); required unless --insecure",
        ),
    )
    backends_from: Path | None = field(
        default=None,
        metadata=flag(
            type="existing_dir",
            metavar="DIR",
            help="embedded mode: read CacheBackends from YAML files in this directory "
            "(default: unset, the live API)",
        ),
    )
    kubeconfig: str | None = field(
        default=None, metadata=flag(add=kubeaccess.add_kubeconfig_argument)
    )
    kvevent_subscriber_image: str | None = field(
        default=None,
        metadata=flag(
            type="optional_text",
            metavar="IMAGE",
            help="image of the kvevent-subscriber sidecar (default: unset, no sidecar)",
        ),
    )
    server_address: str = field(
        default="inference-cache-server:50051",
        metadata=flag(
            metavar="HOST:PORT",
            help="gRPC address of the cache-index server the kvevent-subscriber reports to",
        ),
    )
    backend_list_timeout: float = field(
        default=DEFAULT_LIST_TIMEOUT_SECONDS,
        metadata=flag(
            type="positive_float",
            metavar="SECONDS",
            help="live mode: seconds the Pod webhook waits for the CacheBackend list before "
            "admitting the pod unwired (list_error); keep it well inside the webhook's "
            "timeoutSeconds (5)",
        ),
    )
    max_body_bytes: int = field(
        default=DEFAULT_MAX_BODY_BYTES,
        metadata=flag(
            type="positive_int",
            metavar="BYTES",
            help="request body size limit (larger: 413)",
        ),
    )
    max_inflight_bytes: int = field(
        default=DEFAULT_MAX_INFLIGHT_BYTES,
        metadata=flag(
            type="positive_int",
            metavar="BYTES",
            help="body bytes this process reads, decodes and judges at once; the rest wait, "
            "then get 503 (size it with the memory limit: docs/install.md)",
        ),
    )
    limit_concurrency: int = field(
        default=DEFAULT_LIMIT_CONCURRENCY,
        metadata=flag(
            type="positive_int",
            metavar="N",
            help="admission requests (body received) this process judges at once; more get "
            "503 + Retry-After; idle connections and bodies on their way do not count",
        ),
    )
    access_review_allowed_ttl: float = field(
        default=DEFAULT_ACCESS_REVIEW_ALLOWED_TTL,
        metadata=flag(
            type="non_negative_float",
            metavar="SECONDS",
            help="live mode: seconds an allowed SubjectAccessReview answer is reused for the "
            "same user and permission, as kube-apiserver's webhook authorizer caches them "
            "(a revoked permission may still be used for that long); 0 asks the API server "
            "on every engine- or workload-shaping write",
        ),
    )
    access_review_denied_ttl: float = field(
        default=0.0,
        metadata=flag(
            type="non_negative_float",
            metavar="SECONDS",
            help="live mode: seconds a denied SubjectAccessReview answer is reused",
        ),
    )
    request_head_timeout: float = field(
        default=DEFAULT_HEAD_TIMEOUT_SECONDS,
        metadata=flag(
            type="positive_float",
            metavar="SECONDS",
            help="seconds a connection has to deliver a complete request head (TLS handshake "
            "included; after an idle spell, from its first byte) before it is closed",
        ),
    )
    keep_alive_timeout: int = field(
        default=DEFAULT_KEEP_ALIVE_SECONDS,
        metadata=flag(
            type="positive_int",
            metavar="SECONDS",
            help="seconds an idle keep-alive connection stays open after an answer",
        ),
    )
    tls_reload_interval: float = field(
        default=2.0,
        metadata=flag(
            type="positive_float",
            metavar="SECONDS",
            help="seconds between certificate checks (two stat calls: cheap)",
        ),
    )
    shutdown_drain_seconds: float = field(
        default=5.0,
        metadata=flag(
            type="non_negative_float",
            metavar="SECONDS",
            help="after SIGTERM: /readyz answers 503 while requests are still served this long",
        ),
    )
    shutdown_timeout_seconds: float = field(
        default=10,
        metadata=flag(
            type="non_negative_int",
            metavar="SECONDS",
            help="after the drain: the longest wait for in-flight requests before exiting",
        ),
    )
    log_level: str = field(
        default="info",
        metadata=flag(
            type="log_level",
            metavar="LEVEL",
            help=f"log level ({', '.join(cli_types.LOG_LEVELS)})",
        ),
    )
    # ICACHE_WORKERS would read like the reconcile workers.
    workers: int = field(
        default=0,
        metadata=flag(
            type="non_negative_int",
            metavar="N",
            env="ICACHE_WEBHOOK_WORKERS",
            help="worker processes; 0 means the CPUs the container gets, its CPU limit rounded up",
        ),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field of ``WebhookSettings``, in its order."""
    for setting in fields(WebhookSettings):
        spec: WebhookFlag = setting.metadata["flag"]
        if spec.add is not None:
            spec.add(parser)
            continue
        options: dict[str, Any] = {"default": setting.default, "help": spec.help}
        if spec.type is not None:
            options["type"] = getattr(cli_types, spec.type)
        if spec.metavar is not None:
            options["metavar"] = spec.metavar
        if spec.action is not None:
            options["action"] = spec.action
        action = parser.add_argument("--" + setting.name.replace("_", "-"), **options)
        if spec.env is not None:
            action.declared_env = spec.env  # type: ignore[attr-defined]


def settings_from(args: argparse.Namespace) -> WebhookSettings:
    """The one place the webhook's flags leave the parsed command line."""
    return WebhookSettings(**{s.name: getattr(args, s.name) for s in fields(WebhookSettings)})


def listen_host(settings: WebhookSettings) -> str:
    """--host, else every IPv4 address with TLS and loopback only for plain HTTP: the
    insecure mode serves /metrics and live-API lookups to whoever can connect."""
    if settings.host is not None:
        return str(settings.host)
    return "127.0.0.1" if settings.insecure else "0.0.0.0"


def build_source(settings: WebhookSettings, api: ApiServer | None) -> BackendSource:
    if api is None:
        from webhook_svc.backend_files import load_backends

        # build_api returns None only with --backends-from.
        assert settings.backends_from is not None

        # Namespace-less files stay unscoped ("") and join the asking pod's namespace.
        return FileBackendSource(
            settings.backends_from, functools.partial(load_backends, default_namespace="")
        )
    return ApiBackendSource(api, settings.backend_list_timeout)


def build_api(settings: WebhookSettings) -> ApiServer | None:
    """The API client of this process (kubeio.access: flag, in-cluster,
    KUBECONFIG, ~/.kube/config); None in embedded mode."""
    if settings.backends_from:
        return None
    from kubeio.async_client import ApiServer

    loaded = kubeaccess.load_configuration(settings.kubeconfig)
    return ApiServer(functools.partial(kubeaccess.async_client_for, loaded))


def _access_reviewer(settings: WebhookSettings, api: ApiServer | None) -> AccessReviewer | None:
    """Who reviews CacheBackend writers: SubjectAccessReviews through ``api`` (cached
    when a TTL is set); None in embedded mode, which has no API server to ask."""
    if api is None:
        log.warning(
            "embedded mode: no API server, so no SubjectAccessReview of CacheBackend writers"
        )
        return None
    from webhook_svc.workload_authz import ApiAccessReviewer, ReviewCache

    allowed_ttl, denied_ttl = settings.access_review_allowed_ttl, settings.access_review_denied_ttl
    cache = ReviewCache(allowed_ttl, denied_ttl) if allowed_ttl or denied_ttl else None
    return ApiAccessReviewer(api, cache=cache)


def _serving_fields(settings: WebhookSettings) -> dict[str, object]:
    """The fields of the start-up log line: where and how the webhook serves."""
    mode = f"embedded ({settings.backends_from})" if settings.backends_from else "live API"
    return {
        "host": listen_host(settings),
        "port": settings.port,
        "tls": not settings.insecure,
        "backends": mode,
    }


def run(args: argparse.Namespace) -> int:
    return _serve(settings_from(args))


def _serve(settings: WebhookSettings) -> int:
    """Serve until a signal: bind and fork the workers (when there are several), then in each
    worker build the app from the flags and run it under uvicorn, draining on stop."""
    workers = settings.workers if settings.workers > 0 else available_cpus()
    # Before prometheus_client is imported: it picks its value store at import time.
    metrics_dir = share_metrics_between_workers() if workers > 1 else None
    import uvicorn

    from webhook_svc.app import create_app
    from webhook_svc.http.lifecycle import DrainingServer
    from webhook_svc.http.serving import Connections
    from webhook_svc.http.tls import ReloadingTLS

    jsonlog.setup(settings.log_level)
    if not settings.insecure and not (settings.tls_cert_file and settings.tls_key_file):
        log.error("--tls-cert-file and --tls-key-file are required unless --insecure is given")
        return 2
    listener = None
    if metrics_dir:
        # Forked before any thread, client or TLS context exists: each worker builds its own.
        listener = bind(listen_host(settings), settings.port)
        code = fork_workers(listener, workers)
        if code is not None:  # the supervisor, once every worker is gone
            shutil.rmtree(metrics_dir, ignore_errors=True)
            return code
    api = build_api(settings)
    source = build_source(settings, api)
    ctx = InjectContext(
        kvevent_subscriber_image=settings.kvevent_subscriber_image,
        server_address=settings.server_address,
    )
    reviewer = _access_reviewer(settings, api)
    app = create_app(
        source,
        ctx,
        max_body_bytes=settings.max_body_bytes,
        max_inflight_bytes=settings.max_inflight_bytes,
        access_reviewer=reviewer,
        limit_concurrency=settings.limit_concurrency,
        on_shutdown=[api.close] if api is not None else [],
    )
    tls: ReloadingTLS | None = None
    # Both files are set unless --insecure: checked above, before any fork.
    if not settings.insecure and settings.tls_cert_file and settings.tls_key_file:
        tls = ReloadingTLS(
            settings.tls_cert_file, settings.tls_key_file, settings.tls_reload_interval
        )
        tls.load()  # unusable files at startup: fail now, with the error
        tls.reloads = app.state.metrics.tls_reloads
        tls.report_expiry_to(app.state.metrics.certificate_expires_at)
    connections = Connections(settings.request_head_timeout)
    config = uvicorn.Config(
        app,
        host=listen_host(settings),
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        # The request limit is the serving layer's (webhook_svc/http/serving.py): uvicorn's
        # counts idle connections against it.
        limit_concurrency=None,
        timeout_keep_alive=settings.keep_alive_timeout,
        # uvicorn waits with asyncio.wait_for, which takes fractional seconds too.
        timeout_graceful_shutdown=settings.shutdown_timeout_seconds,  # type: ignore[arg-type]
        ssl_context_factory=tls,
        http=connections.protocol_class(),
        # Nothing proxies the webhook: the API server calls it directly.
        proxy_headers=False,
        server_header=False,
    )
    log.info("serving admission webhooks", extra=_serving_fields(settings))
    server = DrainingServer(config, settings.shutdown_drain_seconds, connections)
    server.run(sockets=[listener] if listener else None)
    return 0
