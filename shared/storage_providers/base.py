"""The storage-provider adapter contract.

A provider adapter owns the workload and Service of one remote-storage technology
and emits the structured :class:`~shared.bindings.Binding` the engine adapter
consumes. Adapters are declarative: they describe their container (image,
command/args, ports, probe) and their pod-level networking; the generic renderer
in :mod:`shared.storage_providers.render` turns that into Kubernetes objects, so
adding a provider is adding one module that fills in these hooks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from shared.api.models import CacheBackendSpec, ResourceRequirements
from shared.bindings import PROVIDER_PROTOCOL, Binding, Protocol

# The backend's password Secret holds the password (AUTH_PASSWORD_KEY, what clients
# read) and, for a provider that requires auth, the server's config file carrying it
# (AUTH_CONFIG_KEY). The server reads that file from a Secret volume: the password is
# neither in the pod spec nor (as an expanded $(VAR)) in the server's argv.
AUTH_PASSWORD_KEY = "password"
AUTH_CONFIG_KEY = "server.conf"
AUTH_CONFIG_VOLUME = "auth-config"
AUTH_CONFIG_DIR = "/etc/inferencecache/auth"
AUTH_CONFIG_PATH = f"{AUTH_CONFIG_DIR}/{AUTH_CONFIG_KEY}"


@dataclass(frozen=True)
class Port:
    name: str
    port: int


class StorageProvider(ABC):
    """One remote-storage technology: its container, Service ports and binding protocol."""

    #: The spec.remoteStorage.provider value this adapter serves.
    provider: ClassVar[str]
    #: Short name used in object names and the app.kubernetes.io/name label.
    component: ClassVar[str]
    #: Name of the (only) container in the managed pod.
    container_name: ClassVar[str]
    default_image: ClassVar[str]
    #: Container ports. ``service_ports`` is the ordered subset the Service exposes;
    #: its FIRST entry is what status.endpoint publishes.
    container_ports: ClassVar[tuple[Port, ...]]
    service_ports: ClassVar[tuple[Port, ...]]
    #: Headless Service (clusterIP: None): DNS resolves straight to the pod/node IP.
    headless_service: ClassVar[bool] = False
    host_network: ClassVar[bool] = False
    #: Deployment strategy Recreate (no surge) for pods that bind host ports.
    recreate_strategy: ClassVar[bool] = False
    #: Command used when the provider block sets none (providers with an operator
    #: ``command`` override; Redis renders args instead and overrides command_and_args).
    default_command: ClassVar[tuple[str, ...]] = ()
    #: Serves only clients that authenticate with the password of the backend's auth
    #: Secret (``auth_secret_name``); the server reads it from ``AUTH_CONFIG_PATH``.
    requires_auth: ClassVar[bool] = False
    #: The uid/gid the server process runs as (the pod's runAsUser/runAsGroup/fsGroup,
    #: with runAsNonRoot); None keeps the image's own user (a provider whose image user
    #: is not known to be non-root).
    run_as_user: ClassVar[int | None] = None
    #: Whether the container's root filesystem is mounted read-only: every path the
    #: server writes is one of ``writable_paths``.
    read_only_root_filesystem: ClassVar[bool] = False
    #: (volume name, mount path) of each emptyDir the server writes to.
    writable_paths: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: Plain env vars of the container (HOME and scratch paths on an emptyDir).
    env: ClassVar[tuple[tuple[str, str], ...]] = ()

    @property
    def network_policy(self) -> bool:
        """Whether a NetworkPolicy can isolate the provider's pods: not on the host
        network, where NetworkPolicy does not apply."""
        return not self.host_network

    @property
    def protocol(self) -> Protocol:
        return PROVIDER_PROTOCOL[self.provider]

    @abstractmethod
    def block(self, spec: CacheBackendSpec) -> Any:
        """The typed provider block under spec.remoteStorage (or None when omitted)."""

    def image(self, spec: CacheBackendSpec) -> str:
        blk = self.block(spec)
        return (blk.image if blk is not None and blk.image else None) or self.default_image

    def resources(self, spec: CacheBackendSpec) -> ResourceRequirements | None:
        """The operator's typed resources block; None when omitted (the default applies)."""
        blk = self.block(spec)
        return blk.resources if blk is not None else None

    def command_and_args(
        self, spec: CacheBackendSpec, resources: dict[str, Any]
    ) -> tuple[list[str] | None, list[str] | None]:
        """(command, args) of the container, given the rendered resources block.

        The default: the operator's ``command`` from the provider block, else
        ``default_command``.
        """
        blk = self.block(spec)
        command = getattr(blk, "command", None) if blk is not None else None
        return list(command or self.default_command), None

    def auth_config(self, password: str) -> str:
        """The server config file that makes it require ``password`` (providers with
        ``requires_auth``); stored in the auth Secret under AUTH_CONFIG_KEY."""
        raise NotImplementedError(f"{self.provider} takes no password")

    def readiness_probe(self) -> dict[str, Any]:
        # A TCP probe on the first Service port: the port the binding dials.
        return {"tcpSocket": {"port": self.service_ports[0].port}}

    def binding(self, endpoint: str) -> Binding:
        """The structured binding for an observed endpoint (host:port, no scheme)."""
        return Binding(protocol=self.protocol, endpoint=endpoint)
