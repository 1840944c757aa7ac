"""The runtime-adapter contract (KVCacheRuntimeAdapter in the spec)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol


class InjectionRejectedError(Exception):
    """The adapter refuses to wire this pod; the Pod webhook turns it into a fail-open admit."""


class InjectionDeclinedError(InjectionRejectedError):
    """The adapter leaves this pod unwired for a reason of its own (``reason``, a Pod
    webhook decision reason), with admission ``warnings``; ``declined`` (a CamelCase
    reason) is recorded on the pod, so the worker can count it, when set."""

    def __init__(
        self,
        message: str,
        reason: str,
        *,
        declined: str | None = None,
        warnings: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.declined = declined
        self.warnings = warnings


@dataclass(frozen=True)
class InjectContext:
    """Webhook settings an adapter may need (not part of the CacheBackend)."""

    kvevent_subscriber_image: str | None = None
    # gRPC address of the cache-index server the kvevent-subscriber reports to.
    server_address: str = "inference-cache-server:50051"


class RuntimeAdapter(ABC):
    """Declares its pair, its reserved args/env and the bindings it accepts; injects."""

    name: ClassVar[str]
    runtime: ClassVar[str]
    cache_type: ClassVar[str]
    reserved_args: ClassVar[tuple[str, ...]] = ()
    reserved_env: ClassVar[tuple[str, ...]] = ()
    # None stands for the host-only (nil) binding.
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset()

    def supports_binding(self, binding: Binding | None) -> bool:
        return (binding.protocol if binding else None) in self.accepted_protocols

    def merged_env(self, binding: Binding | None) -> tuple[str, ...]:
        """Env names the adapter merges with the operator's own value itself (the pod
        template's and spec.integration.engineOverrides.env's): an engineOverrides.env
        entry of such a name is already in the injected value and is not upserted over
        it again. suppressEnv still applies to them."""
        del binding
        return ()

    def inject(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        """Return a wired copy of ``pod`` (never mutate the input); raise InjectionRejectedError.

        SupportsBinding is part of the contract: a binding the adapter does not accept is
        rejected here, once for every adapter, before any adapter-specific wiring runs.
        """
        if not self.supports_binding(binding):
            accepted = ", ".join(sorted(p or "host-only" for p in self.accepted_protocols))
            got = binding.protocol if binding else "host-only"
            raise InjectionRejectedError(
                f"{self.name} does not accept a {got} binding (accepts {accepted})"
            )
        return self.wire(pod, backend, binding, ctx)

    @abstractmethod
    def wire(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        """The adapter's own wiring, for a binding it accepts."""
