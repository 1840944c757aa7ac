"""Spec rules "External remote storage requires an endpoint", "Endpoint ownership is explicit" and "Cross-namespace endpoint requires opt-in"."""

from __future__ import annotations

from shared import constants as c
from shared.endpoints import endpoint_shape_error, service_namespace
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    FieldError,
    forbidden,
    invalid,
    required,
)
from shared.validation.vocabulary import REMOTE, ownership_of, provider_of, trimmed_endpoint

# ------------------------------------------------------------------ endpoints


def reject_external_without_endpoint(ctx: RuleContext) -> list[FieldError]:
    """Spec "External remote storage requires an endpoint" (whitespace-only is empty)."""
    spec = ctx.parsed
    if ownership_of(spec) != c.OWNERSHIP_EXTERNAL or trimmed_endpoint(spec):
        return []
    provider = provider_of(spec) or "remote"
    return [
        required(
            REMOTE.child("endpoint"),
            f"ownership External needs the address of the operator-run {provider} storage "
            f"(host:port)",
        )
    ]


def reject_managed_endpoint(ctx: RuleContext) -> list[FieldError]:
    """Spec "Endpoint ownership is explicit": a Managed endpoint comes from the Service the
    controller provisions, so a user-supplied value is rejected."""
    spec = ctx.parsed
    if ownership_of(spec) != c.OWNERSHIP_MANAGED or not trimmed_endpoint(spec):
        return []
    return [
        forbidden(
            REMOTE.child("endpoint"),
            "ownership Managed publishes the provisioned Service's address in status.endpoint; "
            "remove spec.remoteStorage.endpoint (or set ownership: External)",
        )
    ]


def reject_invalid_endpoint_shape(ctx: RuleContext) -> list[FieldError]:
    """Spec "Externally owned remote storage": the provider's endpoint shape."""
    spec = ctx.parsed
    provider = provider_of(spec)
    if ownership_of(spec) != c.OWNERSHIP_EXTERNAL or provider is None or not trimmed_endpoint(spec):
        return []
    assert spec.remote_storage is not None
    assert spec.remote_storage.endpoint is not None
    error = endpoint_shape_error(provider, spec.remote_storage.endpoint)
    if error is None:
        return []
    return [invalid(REMOTE.child("endpoint"), spec.remote_storage.endpoint, error)]


def reject_cross_namespace_endpoint(ctx: RuleContext) -> list[FieldError]:
    """Spec "Cross-namespace endpoint requires opt-in" (spec.allowCrossNamespace)."""
    spec = ctx.parsed
    provider = provider_of(spec)
    endpoint = trimmed_endpoint(spec)
    if ownership_of(spec) != c.OWNERSHIP_EXTERNAL or not endpoint or spec.allow_cross_namespace:
        return []
    if provider is not None and endpoint_shape_error(provider, endpoint) is not None:
        return []  # reject_invalid_endpoint_shape reports it; the namespace is moot
    namespace = service_namespace(endpoint, ctx.namespace)
    if namespace is None or namespace == ctx.namespace:
        return []
    assert spec.remote_storage is not None
    return [
        invalid(
            REMOTE.child("endpoint"),
            spec.remote_storage.endpoint,
            f'resolves to a Service in namespace "{namespace}", not the CacheBackend\'s '
            f'namespace "{ctx.namespace}"; set spec.allowCrossNamespace: true to cross that '
            f"tenancy boundary",
        )
    ]
