"""Settings of the webhook process (command-line flags of `icache webhook`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WebhookSettings:
    host: str = "0.0.0.0"
    port: int = 8443
    insecure: bool = False
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Embedded mode: CacheBackends from YAML files in this directory instead of the API.
    backends_from: Path | None = None
    kubeconfig: str | None = None
    kvevent_subscriber_image: str | None = None
    # gRPC address of the cache-index server the kvevent-subscriber sidecar reports to.
    server_address: str = "inference-cache-server:50051"
    max_body_bytes: int = 3 * 1024 * 1024
    log_level: str = "info"
