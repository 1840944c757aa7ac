"""Spec rule "Provider resources must be valid" and its named parts, judged at the selected provider's path."""

from __future__ import annotations

from shared.quantity import is_integer, is_multiple_of, parse_quantity
from shared.validation.context import RuleContext
from shared.validation.field_errors import (
    FieldError,
    forbidden,
    invalid,
)
from shared.validation.resource_entries import (
    _selected_resources,
    resource_kind,
    resource_name_error,
)
from shared.validation.vocabulary import HUGEPAGES_PREFIX


def reject_invalid_resource_names(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectInvalidResourceNames: standard, hugepages-<positive size>, or a
    vendor-prefixed qualified name outside kubernetes.io/; names the offending key."""
    errors = []
    for entry in ctx.resource_entries:
        reason = resource_name_error(entry.name)
        if reason is not None:
            errors.append(invalid(entry.path, entry.name, reason))
    return errors


def reject_malformed_resource_quantities(ctx: RuleContext) -> list[FieldError]:
    """CRD schema: each requests/limits entry is a resource.Quantity (the apiserver's
    pattern check, repeated for replayed reviews that never went through it)."""
    return [
        invalid(entry.path, entry.raw, entry.error or "not a quantity")
        for entry in ctx.resource_entries
        if entry.value is None
    ]


def reject_negative_resource_quantities(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectNegativeResourceQuantities: strictly negative entries; zero is admitted."""
    return [
        invalid(entry.path, entry.raw, "must be greater than or equal to 0")
        for entry in ctx.resource_entries
        if entry.value is not None and entry.value < 0
    ]


def reject_resource_claims(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectResourceClaims: DRA claims until pod-level resourceClaims are rendered."""
    selected = _selected_resources(ctx.parsed)
    if selected is None or not selected[1].claims:
        return []
    base, resources = selected
    names = ", ".join(claim.name for claim in resources.claims or [])
    return [
        forbidden(
            base.child("claims"),
            f"Dynamic Resource Allocation claims ({names}) are not supported yet: the provider "
            f"renderer does not create the matching pod-level spec.resourceClaims",
        )
    ]


def reject_resource_limits_below_requests(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectResourceLimitsBelowRequests: overcommittable limits >= requests;
    hugepages and extended resources limits == requests (when both are set)."""
    judged = ctx.judged_resource_entries
    limits = {e.name: (e, v) for e, _, v in judged if e.which == "limits"}
    errors = []
    for entry, kind, request in judged:
        if entry.which != "requests" or entry.name not in limits:
            continue
        limit_entry, limit = limits[entry.name]
        if kind == "standard":
            if request > limit:
                errors.append(
                    invalid(
                        limit_entry.path,
                        limit_entry.raw,
                        f"must be greater than or equal to {entry.name} request of "
                        f"{entry.raw} (requests[{entry.name}])",
                    )
                )
        elif request != limit:
            errors.append(
                invalid(
                    limit_entry.path,
                    limit_entry.raw,
                    f"must be equal to {entry.name} request of {entry.raw} "
                    f"(requests[{entry.name}]): {kind} resources cannot be overcommitted",
                )
            )
    return errors


def reject_requests_only_for_non_overcommittable_resources(
    ctx: RuleContext,
) -> list[FieldError]:
    """Spec rejectRequestsOnlyForNonOvercommittableResources: hugepages and extended
    resources declare both halves (requests-only is fine for cpu/memory/ephemeral-storage)."""
    selected = _selected_resources(ctx.parsed)
    if selected is None:
        return []
    base, resources = selected
    limits = resources.limits or {}
    errors = []
    for entry in ctx.resource_entries:
        kind = resource_kind(entry.name)
        if (
            entry.which == "requests"
            and kind in ("hugepages", "extended")
            and entry.name not in limits
        ):
            errors.append(
                invalid(
                    entry.path,
                    entry.raw,
                    f"{entry.name} is not overcommittable: it must also be set in "
                    f"{base.child('limits').key(entry.name)} with the same value",
                )
            )
    return errors


def reject_fractional_extended_resources(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectFractionalExtendedResources: extended resources come in whole units."""
    return [
        invalid(entry.path, entry.raw, "must be an integer: extended resources are whole units")
        for entry, kind, value in ctx.judged_resource_entries
        if kind == "extended" and not is_integer(value)
    ]


def reject_misaligned_hugepage_quantities(ctx: RuleContext) -> list[FieldError]:
    """Spec rejectMisalignedHugepageQuantities: a positive quantity is a whole multiple of
    the page size parsed from the name (zero admits; negatives are reported upstream)."""
    errors = []
    for entry, kind, value in ctx.judged_resource_entries:
        if kind != "hugepages" or value == 0:
            continue
        size_text = entry.name[len(HUGEPAGES_PREFIX) :]
        page = parse_quantity(size_text)
        if not is_multiple_of(value, page):
            errors.append(
                invalid(
                    entry.path,
                    entry.raw,
                    f"must be a whole multiple of the {size_text} page size",
                )
            )
    return errors
