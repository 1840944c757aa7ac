"""The selected provider's resource entries, parsed once per object, and what a resource name is."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import NamedTuple

from shared.api.models import CacheBackendSpec, ResourceRequirements
from shared.labels import is_qualified_name
from shared.quantity import parse_quantity
from shared.validation.field_errors import (
    FieldPath,
)
from shared.validation.vocabulary import (
    HUGEPAGES_PREFIX,
    PROVIDER_BLOCKS,
    REMOTE,
    STANDARD_RESOURCES,
    ResourceKind,
)

# ---------------------------------------------------------- provider resources


class ResourceEntry(NamedTuple):
    """One requests/limits entry of the selected provider's resources (a tuple: built
    for every entry of every review, and a frozen dataclass costs several times more)."""

    block: FieldPath  # spec.remoteStorage.<provider>.resources
    which: str  # "requests" | "limits"
    name: str
    raw: int | str
    value: Decimal | None  # None: malformed, see error
    error: str | None

    @property
    def path(self) -> FieldPath:
        """Only errors name it: built when one is reported."""
        return self.block.child(self.which).key(self.name)


def _selected_resources(spec: CacheBackendSpec) -> tuple[FieldPath, ResourceRequirements] | None:
    """spec.remoteStorage.<selected provider>.resources, with its path."""
    rs = spec.remote_storage
    if rs is None or rs.provider is None:
        return None
    wire, attr = PROVIDER_BLOCKS[rs.provider]
    block = getattr(rs, attr)
    if block is None or block.resources is None:
        return None
    return REMOTE.child(wire, "resources"), block.resources


def _parse_or_error(raw: int | str) -> tuple[Decimal | None, str | None]:
    try:
        return parse_quantity(raw), None
    except ValueError as exc:
        return None, str(exc)


def parse_or_none(raw: int | str) -> Decimal | None:
    return _parse_or_error(raw)[0]


def selected_entries(spec: CacheBackendSpec) -> Iterator[ResourceEntry]:
    selected = _selected_resources(spec)
    if selected is None:
        return
    base, resources = selected
    for which in ("requests", "limits"):
        values = getattr(resources, which) or {}
        for name in sorted(values):
            raw = values[name]
            value, error = _parse_or_error(raw)
            yield ResourceEntry(base, which, name, raw, value, error)


# Pure functions of a resource name, asked by several rules about every entry of every
# review: answered once per distinct name per process (bounded).
@lru_cache(maxsize=1024)
def resource_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid container resource name (the apiserver's rules)."""
    if name in STANDARD_RESOURCES:
        return None
    if name.startswith(HUGEPAGES_PREFIX):
        size = parse_or_none(name[len(HUGEPAGES_PREFIX) :])
        if size is None or size <= 0:
            return (
                "hugepages-<size> needs a strictly positive page-size quantity, such as "
                "hugepages-2Mi or hugepages-1Gi"
            )
        return None
    if "/" not in name:
        return (
            "must be a standard resource for containers (cpu, memory, ephemeral-storage), "
            "hugepages-<size>, or a vendor-prefixed extended resource such as nvidia.com/gpu"
        )
    if "kubernetes.io/" in name:
        return (
            "the kubernetes.io/ and requests.kubernetes.io/ prefixes are reserved for native "
            "resources; extended resources carry their vendor's domain, such as nvidia.com/gpu"
        )
    if name.startswith("requests."):
        return "extended resource names must not start with requests."
    if not (is_qualified_name(name) and is_qualified_name("requests." + name)):
        return (
            "must be a qualified name: a DNS subdomain prefix, '/', and a name of at most 63 "
            "characters (alphanumerics, '-', '_' or '.', starting and ending with an "
            "alphanumeric), such as nvidia.com/gpu"
        )
    return None


@lru_cache(maxsize=1024)
def resource_kind(name: str) -> ResourceKind | None:
    """standard (overcommittable), hugepages, extended; None for an invalid name."""
    if resource_name_error(name) is not None:
        return None
    if name in STANDARD_RESOURCES:
        return "standard"
    if name.startswith(HUGEPAGES_PREFIX):
        return "hugepages"
    return "extended"


def judged_entries(
    entries: Sequence[ResourceEntry],
) -> Iterator[tuple[ResourceEntry, ResourceKind, Decimal]]:
    """Entries with a valid name and a well-formed, non-negative quantity.

    Malformed names, malformed and negative quantities are each reported by their own
    rule; the relational rules below skip them rather than pile on.
    """
    for entry in entries:
        kind = resource_kind(entry.name)
        if kind is not None and entry.value is not None and entry.value >= 0:
            yield entry, kind, entry.value
