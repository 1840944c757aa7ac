"""Provider singletons: the Mooncake master and managed Redis run one replica, not autoscaled; engineHostNetwork only where Mooncake needs it."""

from __future__ import annotations

from typing import Final

from shared import constants as c
from shared.api import effective
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    SPEC,
    FieldError,
    forbidden,
    invalid,
)
from shared.validation.vocabulary import (
    AUTOSCALING,
    INTEGRATION,
    is_events_only,
    is_managed_redis,
    is_mooncake,
    provider_of,
)

# ------------------------------------------------------------------ Mooncake


def reject_mooncake_multiple_replicas(ctx: RuleContext) -> list[FieldError]:
    """Spec "Mooncake provider configuration": the managed master is a singleton."""
    spec = ctx.parsed
    replicas = effective.replicas(spec)
    if not is_mooncake(spec) or replicas <= 1:
        return []
    return [
        invalid(
            SPEC.child("replicas"),
            replicas,
            "the Mooncake master is a singleton on the host network: use 0 or 1 (a second "
            "replica cannot bind its node ports or splits the store)",
        )
    ]


def reject_mooncake_autoscaling(ctx: RuleContext) -> list[FieldError]:
    """Spec "Mooncake provider configuration": spec.autoscaling with provider Mooncake."""
    spec = ctx.parsed
    if spec.autoscaling is None or not is_mooncake(spec) or is_events_only(spec):
        return []
    return [
        forbidden(
            AUTOSCALING,
            "spec.autoscaling is not supported for remoteStorage.provider Mooncake: the "
            "master is a singleton on the host network and cannot be autoscaled",
        )
    ]


# ---------------------------------------------------------------- managed Redis

MANAGED_REDIS_SINGLETON: Final = (
    "the managed Redis is one non-clustered instance behind a single Service: more "
    "replicas would each hold a separate part of the keyspace, so every engine would see "
    "a different partial cache"
)


def reject_managed_redis_multiple_replicas(ctx: RuleContext) -> list[FieldError]:
    """remoteStorage Redis + Managed provisions one non-clustered instance,
    so spec.replicas is 0 or 1 (0 disables it)."""
    spec = ctx.parsed
    replicas = effective.replicas(spec)
    if not is_managed_redis(spec) or replicas <= 1:
        return []
    return [
        invalid(
            SPEC.child("replicas"),
            replicas,
            f"use 0 or 1: {MANAGED_REDIS_SINGLETON}",
        )
    ]


def reject_managed_redis_autoscaling(ctx: RuleContext) -> list[FieldError]:
    """spec.autoscaling with remoteStorage Redis + Managed (scaling out would
    shard the keyspace as it goes)."""
    spec = ctx.parsed
    if spec.autoscaling is None or not is_managed_redis(spec) or is_events_only(spec):
        return []
    return [
        forbidden(
            AUTOSCALING,
            f"spec.autoscaling is not supported for a Managed Redis remoteStorage: "
            f"{MANAGED_REDIS_SINGLETON}; remove spec.autoscaling",
        )
    ]


def reject_unneeded_engine_host_network(ctx: RuleContext) -> list[FieldError]:
    """Spec: integration.engineHostNetwork is rejected on backends that do not need it
    (only a Mooncake remoteStorage does), so it never sits inert."""
    spec = ctx.parsed
    if not effective.engine_host_network(spec) or provider_of(spec) == c.PROVIDER_MOONCAKE:
        return []
    return [
        forbidden(
            INTEGRATION.child("engineHostNetwork"),
            "only a Mooncake remoteStorage needs engine pods on the host network; remove it "
            "(host networking is a privilege it would grant for nothing)",
        )
    ]
