"""Quantities the adapters render: host-memory budgets and GPU requests."""

from __future__ import annotations

from decimal import ROUND_DOWN, Decimal
from typing import Any

from shared.api import effective
from shared.api.models import CacheBackendSpec
from shared.quantity import parse_quantity
from shared.runtime_adapters.base import InjectionRejectedError

GIB = Decimal(1024**3)
GPU_RESOURCE = "nvidia.com/gpu"


def host_memory_bytes(spec: CacheBackendSpec) -> Decimal:
    """spec.lmCache.hostMemory.capacity in bytes (default 4Gi); malformed is a rejection."""
    capacity = effective.host_memory_capacity(spec)
    try:
        value = parse_quantity(capacity)
    except (ValueError, ArithmeticError) as exc:
        raise InjectionRejectedError(
            f"spec.lmCache.hostMemory.capacity {capacity!r} is not a quantity: {exc}"
        ) from exc
    if value <= 0:
        raise InjectionRejectedError(
            f"spec.lmCache.hostMemory.capacity {capacity!r} must be positive"
        )
    return value


def gib_decimal_string(num_bytes: Decimal) -> str:
    """LMCACHE_MAX_LOCAL_CPU_SIZE: GiB (LMCache multiplies its "GB" by 1024**3) as a float
    literal such as ``4.0`` or ``1.5``.

    Truncated to three decimals so the tier never exceeds the declared budget, with a
    floor of 0.001 so a tiny positive budget never renders as a disabled 0.
    """
    gib = (num_bytes / GIB).quantize(Decimal("0.001"), rounding=ROUND_DOWN)
    gib = max(gib, Decimal("0.001"))
    text = format(gib.normalize(), "f")
    return text if "." in text else f"{text}.0"


def per_process_bytes(budget: Decimal, processes: int) -> Decimal:
    """The pod's host-memory budget shared by the engine processes that each pin a pool
    of it: rendered with ``gib_decimal_string`` (truncated), the pod's total stays at
    most the budget and loses under 0.001 GiB per process to the rounding."""
    return budget / max(1, processes)


def whole_gib(num_bytes: Decimal) -> int:
    """The MP worker's --l1-size-gb: whole GiB, rounded down, at least 1."""
    return max(1, int(num_bytes // GIB))


def requests_gpu(container: dict[str, Any]) -> bool:
    """True when the container's limits or requests ask for nvidia.com/gpu > 0."""
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(GPU_RESOURCE)
        if value is None:
            continue
        try:
            if parse_quantity(value) > 0:
                return True
        except (ValueError, ArithmeticError):
            # A malformed quantity would fail Pod validation anyway; it requests nothing.
            continue
    return False
