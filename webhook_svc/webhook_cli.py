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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: 0.0.0.0 with TLS, 127.0.0.1 with --insecure; "
        "'::' for IPv6)",
    )
    parser.add_argument("--port", type=cli_types.port, default=8443, help="port to listen on")
    parser.add_argument(
        "--insecure", action="store_true", help="serve plain HTTP (local replay, no TLS)"
    )
    parser.add_argument(
        "--tls-cert-file",
        type=cli_types.pem_certificate_file,
        metavar="PATH",
        help="serving certificate (PEM); required unless --insecure",
    )
    parser.add_argument(
        "--tls-key-file",
        type=cli_types.pem_key_file,
        metavar="PATH",
        help="serving key (PEM); required unless --insecure",
    )
    parser.add_argument(
        "--backends-from",
        type=cli_types.existing_dir,
        metavar="DIR",
        help="embedded mode: read CacheBackends from YAML files in this directory "
        "(default: unset, the live API)",
    )
    kubeaccess.add_kubeconfig_argument(parser)
    parser.add_argument(
        "--kvevent-subscriber-image",
        type=cli_types.optional_text,
        default=None,
        metavar="IMAGE",
        help="image of the kvevent-subscriber sidecar (default: unset, no sidecar)",
    )
    parser.add_argument(
        "--server-address",
        default="inference-cache-server:50051",
        metavar="HOST:PORT",
        help="gRPC address of the cache-index server the kvevent-subscriber reports to",
    )
    parser.add_argument(
        "--backend-list-timeout",
        type=cli_types.positive_float,
        default=DEFAULT_LIST_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="live mode: seconds the Pod webhook waits for the CacheBackend list before "
        "admitting the pod unwired (list_error); keep it well inside the webhook's "
        "timeoutSeconds (5)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=cli_types.positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="BYTES",
        help="request body size limit (larger: 413)",
    )
    parser.add_argument(
        "--max-inflight-bytes",
        type=cli_types.positive_int,
        default=DEFAULT_MAX_INFLIGHT_BYTES,
        metavar="BYTES",
        help="body bytes this process reads, decodes and judges at once; the rest wait, "
        "then get 503 (size it with the memory limit: docs/install.md)",
    )
    parser.add_argument(
        "--limit-concurrency",
        type=cli_types.positive_int,
        default=DEFAULT_LIMIT_CONCURRENCY,
        metavar="N",
        help="admission requests (body received) this process judges at once; more get "
        "503 + Retry-After; idle connections and bodies on their way do not count",
    )
    parser.add_argument(
        "--access-review-allowed-ttl",
        type=cli_types.non_negative_float,
        default=DEFAULT_ACCESS_REVIEW_ALLOWED_TTL,
        metavar="SECONDS",
        help="live mode: seconds an allowed SubjectAccessReview answer is reused for the "
        "same user and permission, as kube-apiserver's webhook authorizer caches them "
        "(a revoked permission may still be used for that long); 0 asks the API server "
        "on every engine- or workload-shaping write",
    )
    parser.add_argument(
        "--access-review-denied-ttl",
        type=cli_types.non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="live mode: seconds a denied SubjectAccessReview answer is reused",
    )
    parser.add_argument(
        "--request-head-timeout",
        type=cli_types.positive_float,
        default=DEFAULT_HEAD_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="seconds a connection has to deliver a complete request head (TLS handshake "
        "included; after an idle spell, from its first byte) before it is closed",
    )
    parser.add_argument(
        "--keep-alive-timeout",
        type=cli_types.positive_int,
        default=DEFAULT_KEEP_ALIVE_SECONDS,
        metavar="SECONDS",
        help="seconds an idle keep-alive connection stays open after an answer",
    )
    parser.add_argument(
        "--tls-reload-interval",
        type=cli_types.positive_float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between certificate checks (two stat calls: cheap)",
    )
    parser.add_argument(
        "--shutdown-drain-seconds",
        type=cli_types.non_negative_float,
        default=5.0,
        metavar="SECONDS",
        help="after SIGTERM: /readyz answers 503 while requests are still served this long",
    )
    parser.add_argument(
        "--shutdown-timeout-seconds",
        type=cli_types.non_negative_int,
        default=10,
        metavar="SECONDS",
        help="after the drain: the longest wait for in-flight requests before exiting",
    )
    parser.add_argument(
        "--log-level",
        type=cli_types.log_level,
        default="info",
        metavar="LEVEL",
        help=f"log level ({', '.join(cli_types.LOG_LEVELS)})",
    )
    parser.add_argument(
        "--workers",
        type=cli_types.non_negative_int,
        default=0,
        metavar="N",
        help="worker processes; 0 means the CPUs the container gets, its CPU limit rounded up",
    )


@dataclass(frozen=True)
class WebhookSettings:
    """Every flag of `icache webhook`, as its logic receives them. Plain values: a
    forked worker inherits them as they are."""

    host: str | None
    port: int
    insecure: bool
    tls_cert_file: Path | None
    tls_key_file: Path | None
    backends_from: Path | None
    kubeconfig: str | None
    kvevent_subscriber_image: str | None
    server_address: str
    backend_list_timeout: float
    max_body_bytes: int
    max_inflight_bytes: int
    limit_concurrency: int
    access_review_allowed_ttl: float
    access_review_denied_ttl: float
    request_head_timeout: float
    keep_alive_timeout: int
    tls_reload_interval: float
    shutdown_drain_seconds: float
    shutdown_timeout_seconds: float
    log_level: str
    workers: int


def settings_from(args: argparse.Namespace) -> WebhookSettings:
    """The one place the webhook's flags leave the parsed command line."""
    return WebhookSettings(
        host=args.host,
        port=args.port,
        insecure=args.insecure,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        backends_from=args.backends_from,
        kubeconfig=args.kubeconfig,
        kvevent_subscriber_image=args.kvevent_subscriber_image,
        server_address=args.server_address,
        backend_list_timeout=args.backend_list_timeout,
        max_body_bytes=args.max_body_bytes,
        max_inflight_bytes=args.max_inflight_bytes,
        limit_concurrency=args.limit_concurrency,
        access_review_allowed_ttl=args.access_review_allowed_ttl,
        access_review_denied_ttl=args.access_review_denied_ttl,
        request_head_timeout=args.request_head_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        tls_reload_interval=args.tls_reload_interval,
        shutdown_drain_seconds=args.shutdown_drain_seconds,
        shutdown_timeout_seconds=args.shutdown_timeout_seconds,
        log_level=args.log_level,
        workers=args.workers,
    )


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
