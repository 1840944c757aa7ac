"""The reads behind cross-namespace consent (shared.tenancy decides from them).

Owner side: the candidate consumers are the CacheBackends of the namespaces the owner
names, read from the worker's CacheBackend cache (it holds every backend). Consumer
side: the Service its endpoint names, the backend that owns it, and that backend's
password Secret, each read by name (the worker may get a Secret by name; it never
lists them).

Both sides are level-based: a consumer or a consent that comes or goes is taken in by
the next reconcile of the other side, which the dispatcher's resync (every 30 s)
guarantees within a minute; nothing here depends on which event woke a reconcile.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from kubeio import client as k
from reconciler.steps.reads import ClusterReads, controller_name
from shared import constants as c
from shared.api.models import CacheBackend
from shared.objects import meta
from shared.storage_providers.base import StorageProvider
from shared.storage_providers.render import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    auth_secret_name,
    is_credentials_copy,
    managed_provider,
    render_credentials_copy,
    render_service,
    secret_password,
)
from shared.tenancy import (
    ConsumerStanding,
    admitted_consumers,
    allowed_consumer_namespaces,
    consumer_standing,
    points_at_tier,
    service_reference,
)

log = logging.getLogger(__name__)


def _parse(obj: Mapping[str, Any] | None) -> CacheBackend | None:
    if obj is None:
        return None
    try:
        return CacheBackend.model_validate(obj)
    except pydantic.ValidationError:
        return None


def consumers_of(owner: CacheBackend, reads: ClusterReads) -> list[CacheBackend]:
    """The admitted consumers of ``owner``'s managed tier (none without consent, or for
    a provider no NetworkPolicy isolates)."""
    provider = managed_provider(owner)
    allowed = allowed_consumer_namespaces(owner)
    if provider is None or not provider.network_policy or not allowed:
        return []
    service = render_service(owner, provider)
    candidates = [
        cb
        for ns in sorted(allowed)
        for raw in reads.backends_in(ns)
        if (cb := _parse(raw)) is not None
    ]
    return admitted_consumers(owner, provider.provider, service, candidates)


@dataclass(frozen=True)
class ConsumerSide:
    """A cross-namespace consumer's standing and the credentials copy it should own."""

    standing: ConsumerStanding
    copies: tuple[dict[str, Any], ...] = ()


def _tier_of(
    consumer: CacheBackend, kube: k.KubeClient, reads: ClusterReads
) -> tuple[CacheBackend, StorageProvider, dict[str, Any]] | None:
    """The managed tier the consumer's endpoint names: (owner, provider, Service);
    None when it names no Service of ours in another namespace."""
    rs = consumer.spec.remote_storage
    if (
        rs is None
        or rs.ownership != c.OWNERSHIP_EXTERNAL
        or not consumer.spec.allow_cross_namespace
    ):
        return None
    ref = service_reference(rs.endpoint or "")
    if ref is None or ref.namespace == consumer.metadata.namespace:
        return None
    service = kube.get_or_none(k.SERVICES, ref.namespace, ref.name)
    if service is None or meta(service).labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        return None
    owner_name = controller_name(service, c.KIND)
    owner = _parse(reads.backend(ref.namespace, owner_name)) if owner_name else None
    provider = managed_provider(owner) if owner is not None else None
    if (
        owner is None
        or provider is None
        or not points_at_tier(consumer, provider.provider, service)
    ):
        return None
    return owner, provider, service


def consumer_side(consumer: CacheBackend, kube: k.KubeClient, reads: ClusterReads) -> ConsumerSide:
    """Rule "A refused consumer says so", and the copy of the tier's password a
    consenting owner's consumer gets (kept in step: re-rendered from the owner's
    Secret on every reconcile, under its own name and marked with its source:
    render_credentials_copy). Without consent, or once the consumer no longer points at
    the tier (another endpoint, another provider, host-only), no copy is wanted and the
    reconciler sheds the one it holds, read by name
    (reconciler.steps.reads.reads_owned_secrets says when)."""
    tier = _tier_of(consumer, kube, reads)
    if tier is None:
        return ConsumerSide(ConsumerStanding(True))
    owner, provider, _ = tier
    consented = consumer.metadata.namespace in allowed_consumer_namespaces(owner)
    copies: tuple[dict[str, Any], ...] = ()
    if consented and provider.requires_auth:
        namespace, name = (
            owner.metadata.namespace or "",
            auth_secret_name(owner.metadata.name or ""),
        )
        secret = kube.get_or_none(k.SECRETS, namespace, name)
        # Never a copy of a copy: only the tier's own Secret is a source.
        password = None if is_credentials_copy(secret) else secret_password(secret)
        if password is not None:
            copies = (render_credentials_copy(consumer, provider, password, f"{namespace}/{name}"),)
    standing = consumer_standing(consumer, owner, provider.requires_auth, bool(copies))
    return ConsumerSide(standing, copies)
