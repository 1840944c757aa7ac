"""Replicas and autoscaling: spec rule "spec.replicas=0 + autoscaling requires explicit minReplicas" and minReplicas <= maxReplicas."""

from __future__ import annotations

from shared.api import effective
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    FieldError,
    invalid,
    required,
)
from shared.validation.vocabulary import AUTOSCALING

# --------------------------------------------------------------- autoscaling


def reject_zero_replicas_autoscaling_without_min_replicas(ctx: RuleContext) -> list[FieldError]:
    """Spec "spec.replicas=0 + autoscaling requires explicit minReplicas"."""
    spec = ctx.parsed
    a = spec.autoscaling
    if a is None or a.min_replicas is not None or effective.replicas(spec) != 0:
        return []
    return [
        required(
            AUTOSCALING.child("minReplicas"),
            "spec.replicas is 0, so minReplicas cannot be defaulted from it: set "
            "spec.autoscaling.minReplicas explicitly, or remove spec.autoscaling to scale to "
            "zero unconditionally (otherwise the HPA would silently keep 1 replica)",
        )
    ]


def reject_min_replicas_above_max_replicas(ctx: RuleContext) -> list[FieldError]:
    """Spec autoscaling cross-field validation: minReplicas <= maxReplicas."""
    spec = ctx.parsed
    a = spec.autoscaling
    if a is None or a.min_replicas is None or a.min_replicas <= a.max_replicas:
        return []
    return [
        invalid(
            AUTOSCALING.child("minReplicas"),
            a.min_replicas,
            f"must be less than or equal to spec.autoscaling.maxReplicas ({a.max_replicas})",
        )
    ]
