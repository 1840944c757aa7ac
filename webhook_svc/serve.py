"""`icache webhook`: serve the admission webhooks under uvicorn.

TLS comes from --tls-cert-file/--tls-key-file and is reloaded when the files change
(cert-manager or `icache certs` rotates them): see webhook_svc/tls.py. --insecure serves
plain HTTP for local replay with curl.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import jsonlog, kubeaccess
from shared.runtime_adapters.base import InjectContext
from webhook_svc.admission_gate import (
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
)
from webhook_svc.backend_source import (
    DEFAULT_LIST_TIMEOUT_SECONDS,
    ApiBackendSource,
    AsyncApiBackendSource,
    BackendSource,
    DeadlineSource,
    FileBackendSource,
)

if TYPE_CHECKING:
    from webhook_svc.async_kube import AsyncKubeReader

    # Imported in run(): it imports prometheus_client, which must see the workers'
    # multiprocess directory first (webhook_svc.workers).
    from webhook_svc.tls import ReloadingTLS
from webhook_svc.workers import (
    available_cpus,
    bind,
    fork_workers,
    share_metrics_between_workers,
)

log = logging.getLogger("icache.webhook")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: 0.0.0.0 with TLS, 127.0.0.1 with --insecure; "
        "'::' for IPv6)",
    )
    parser.add_argument("--port", type=int, default=8443, help="port to listen on")
    parser.add_argument("--insecure", action="store_true", help="serve plain HTTP (local replay)")
    parser.add_argument("--tls-cert-file", type=Path, help="serving certificate (PEM)")
    parser.add_argument("--tls-key-file", type=Path, help="serving key (PEM)")
    parser.add_argument(
        "--backends-from",
        type=Path,
        help="embedded mode: read CacheBackends from YAML files in this directory",
    )
    kubeaccess.add_kubeconfig_argument(parser)
    parser.add_argument(
        "--kvevent-subscriber-image",
        default=os.environ.get("ICACHE_KVEVENT_SUBSCRIBER_IMAGE") or None,
        help="image of the kvevent-subscriber sidecar (unset: no sidecar)",
    )
    parser.add_argument(
        "--server-address",
        default=os.environ.get("ICACHE_SERVER_ADDRESS", "inference-cache-server:50051"),
        help="gRPC address of the cache-index server the kvevent-subscriber reports to",
    )
    parser.add_argument(
        "--backend-list-timeout",
        type=float,
        default=DEFAULT_LIST_TIMEOUT_SECONDS,
        help="live mode: seconds the Pod webhook waits for the CacheBackend list before "
        "admitting the pod unwired (list_error); keep it well inside the webhook's "
        "timeoutSeconds (5)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help="request body size limit (larger: 413)",
    )
    parser.add_argument(
        "--max-inflight-bytes",
        type=int,
        default=DEFAULT_MAX_INFLIGHT_BYTES,
        help="body bytes this process reads, decodes and judges at once; the rest wait, "
        "then get 503 (size it with the memory limit: docs/install.md)",
    )
    parser.add_argument(
        "--limit-concurrency",
        type=int,
        default=DEFAULT_LIMIT_CONCURRENCY,
        help="connections plus requests this process holds at once before answering 503",
    )
    parser.add_argument(
        "--tls-reload-interval",
        type=float,
        default=2.0,
        help="seconds between certificate checks (two stat calls: cheap)",
    )
    parser.add_argument(
        "--shutdown-drain-seconds",
        type=float,
        default=5.0,
        help="after SIGTERM: /readyz answers 503 while requests are still served this long",
    )
    parser.add_argument(
        "--shutdown-timeout-seconds",
        type=int,
        default=10,
        help="after the drain: the longest wait for in-flight requests before exiting",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("ICACHE_WEBHOOK_WORKERS") or 0),
        help="worker processes (default 0: the CPUs the container gets, its CPU limit "
        "rounded up; env ICACHE_WEBHOOK_WORKERS)",
    )


def listen_host(args: argparse.Namespace) -> str:
    """--host, else every IPv4 address with TLS and loopback only for plain HTTP: the
    insecure mode serves /metrics and live-API lookups to whoever can connect."""
    if args.host is not None:
        return str(args.host)
    return "127.0.0.1" if args.insecure else "0.0.0.0"


def load_kube_client(kubeconfig: str | None) -> Any:
    """The official ApiClient, connected as every process connects (shared.kubeaccess:
    flag, in-cluster, KUBECONFIG, ~/.kube/config)."""
    return kubeaccess.api_client(kubeconfig)


def build_source(args: argparse.Namespace) -> BackendSource:
    if args.backends_from:
        from webhook_svc.backend_files import load_backends

        # Namespace-less files stay unscoped ("") and join the asking pod's namespace.
        return FileBackendSource(
            args.backends_from, functools.partial(load_backends, default_namespace="")
        )
    timeout = args.backend_list_timeout
    return DeadlineSource(ApiBackendSource(load_kube_client(args.kubeconfig), timeout), timeout)


def build_reader(args: argparse.Namespace) -> AsyncKubeReader | None:
    """The event-loop API client for the Pod route's LIST and the validating route's
    SubjectAccessReviews (webhook_svc/async_kube.py); None (the threaded client then
    does both) in embedded mode or for a configuration it cannot honour."""
    if args.backends_from:
        return None
    from webhook_svc.async_kube import AsyncKubeReader, UnsupportedConfigError

    try:
        return AsyncKubeReader(load_kube_client(args.kubeconfig))
    except UnsupportedConfigError as exc:
        log.warning("API reads go through the threaded client", extra={"why": str(exc)})
        return None


def run(args: argparse.Namespace) -> int:
    workers = args.workers if args.workers > 0 else available_cpus()
    # Before prometheus_client is imported: it picks its value store at import time.
    metrics_dir = share_metrics_between_workers() if workers > 1 else None
    import uvicorn

    from webhook_svc.app import create_app
    from webhook_svc.http_protocol import OneWritePerResponse
    from webhook_svc.lifecycle import DrainingServer
    from webhook_svc.tls import ReloadingTLS

    jsonlog.setup(args.log_level)
    if not args.insecure and not (args.tls_cert_file and args.tls_key_file):
        log.error("--tls-cert-file and --tls-key-file are required unless --insecure is given")
        return 2
    listener = None
    if metrics_dir:
        # Forked before any thread, client or TLS context exists: each worker builds its own.
        listener = bind(listen_host(args), args.port)
        code = fork_workers(listener, workers)
        if code is not None:  # the supervisor, once every worker is gone
            shutil.rmtree(metrics_dir, ignore_errors=True)
            return code
    source = build_source(args)
    ctx = InjectContext(
        kvevent_subscriber_image=args.kvevent_subscriber_image,
        server_address=args.server_address,
    )
    reviewer = None
    if args.backends_from:
        log.warning(
            "embedded mode: no API server, so no SubjectAccessReview of CacheBackend writers"
        )
    else:
        from shared.kubeclient import Kube
        from webhook_svc.workload_authz import DEFAULT_REVIEW_BUDGET_SECONDS, ApiAccessReviewer

        reviewer = ApiAccessReviewer(
            Kube(load_kube_client(args.kubeconfig), timeout=DEFAULT_REVIEW_BUDGET_SECONDS)
        )
    reader = build_reader(args)
    from webhook_svc.workload_authz import AsyncApiAccessReviewer

    app = create_app(
        source,
        ctx,
        max_body_bytes=args.max_body_bytes,
        max_inflight_bytes=args.max_inflight_bytes,
        access_reviewer=reviewer,
        live_backends=AsyncApiBackendSource(reader, args.backend_list_timeout) if reader else None,
        async_access_reviewer=AsyncApiAccessReviewer(reader) if reader else None,
    )
    tls: ReloadingTLS | None = None
    if not args.insecure:
        tls = ReloadingTLS(args.tls_cert_file, args.tls_key_file, args.tls_reload_interval)
        tls.load()  # unusable files at startup: fail now, with the error
        tls.reloads = app.state.metrics.tls_reloads
        tls.report_expiry_to(app.state.metrics.certificate_expires_at)
    config = uvicorn.Config(
        app,
        host=listen_host(args),
        port=args.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        limit_concurrency=args.limit_concurrency,
        timeout_graceful_shutdown=args.shutdown_timeout_seconds,
        ssl_context_factory=tls,
        http=OneWritePerResponse,
        # Nothing proxies the webhook: the API server calls it directly (issue 12: the
        # proxy-headers middleware was a per-request cost for nothing).
        proxy_headers=False,
        server_header=False,
    )
    mode = f"embedded ({args.backends_from})" if args.backends_from else "live API"
    log.info(
        "serving admission webhooks",
        extra={
            "host": listen_host(args),
            "port": args.port,
            "tls": not args.insecure,
            "backends": mode,
        },
    )
    server = DrainingServer(config, drain_seconds=args.shutdown_drain_seconds)
    server.run(sockets=[listener] if listener else None)
    return 0
