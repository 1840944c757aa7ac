"""Managed Mooncake master: the mooncakestore:// remote tier (binding ``mooncakestore``).

Mooncake is a peer-to-peer transfer mesh: the master only hands out directory
pointers and engines then dial node IPs on negotiated ports. Hence host networking
behind a headless Service (its DNS name resolves to the node IP with every port
reachable) and a Recreate rollout (a surge pod would collide on the host ports).

Host networking is refused by Pod Security ``baseline`` and ``restricted`` alike, so a
managed Mooncake runs only in a ``privileged`` namespace. It still gets what does not
depend on the image: no escalation, no capabilities, RuntimeDefault seccomp, no
ServiceAccount token. It keeps the image's user and a writable root filesystem: the
published image documents neither a non-root user nor where the master writes (glog
files), and a guess would crash-loop it.
"""

from __future__ import annotations

from typing import ClassVar

from shared import constants as c
from shared.api.models import CacheBackendSpec, MooncakeProvider
from shared.storage_providers.base import Port, StorageProvider

# Pinned and fully qualified so CRI-O nodes without short-name resolution accept it;
# version-aligned with the mooncake-transfer-engine 0.3.11.post1 release.
DEFAULT_MOONCAKE_IMAGE = "docker.io/kvcacheai/mooncake:0.3.11.post1"
MOONCAKE_RPC_PORT = 50051
MOONCAKE_HTTP_METADATA_PORT = 8080
MOONCAKE_METRICS_PORT = 9003
DEFAULT_MOONCAKE_COMMAND: tuple[str, ...] = (
    "mooncake_master",
    f"--rpc_port={MOONCAKE_RPC_PORT}",
    f"--metrics_port={MOONCAKE_METRICS_PORT}",
    "--enable_http_metadata_server=true",
    "--http_metadata_server_host=0.0.0.0",
    f"--http_metadata_server_port={MOONCAKE_HTTP_METADATA_PORT}",
)


class MooncakeStorageProvider(StorageProvider):
    provider: ClassVar[str] = c.PROVIDER_MOONCAKE
    component: ClassVar[str] = "mooncake"
    container_name: ClassVar[str] = "mooncake-master"
    default_image: ClassVar[str] = DEFAULT_MOONCAKE_IMAGE
    container_ports: ClassVar[tuple[Port, ...]] = (
        Port("rpc", MOONCAKE_RPC_PORT),
        Port("http-metadata", MOONCAKE_HTTP_METADATA_PORT),
        Port("metrics", MOONCAKE_METRICS_PORT),
    )
    # RPC first: status.endpoint (and so the engine binding) publishes the first port.
    service_ports: ClassVar[tuple[Port, ...]] = (
        Port("rpc", MOONCAKE_RPC_PORT),
        Port("http-metadata", MOONCAKE_HTTP_METADATA_PORT),
    )
    headless_service: ClassVar[bool] = True
    host_network: ClassVar[bool] = True
    recreate_strategy: ClassVar[bool] = True
    default_command: ClassVar[tuple[str, ...]] = tuple(DEFAULT_MOONCAKE_COMMAND)

    def block(self, spec: CacheBackendSpec) -> MooncakeProvider | None:
        return spec.remote_storage.mooncake if spec.remote_storage else None
