"""Externally owned remote storage: Ready from the endpoint's shape alone (the controller
does not probe it).
"""

from __future__ import annotations

from reconciler.status.managed_readiness import Verdict
from shared import constants as c
from shared.api.models import CacheBackend
from shared.endpoints import endpoint_shape_error


def external_endpoint_verdict(cb: CacheBackend) -> tuple[Verdict, str]:
    """External ownership: the provider-specific endpoint shape check is the only
    readiness signal. Returns the verdict and the endpoint to publish: status.endpoint
    mirrors the (trimmed) spec endpoint whatever the verdict — nothing dials it (the
    Pod webhook reads and validates the spec field itself), and kubectl shows the
    operator-supplied value next to the reason it was refused."""
    rs = cb.spec.remote_storage
    provider = rs.provider if rs is not None and rs.provider else ""
    raw = (rs.endpoint if rs is not None else None) or ""
    endpoint = raw.strip()
    if not endpoint:
        return (
            Verdict(
                False,
                c.REASON_EXTERNAL_ENDPOINT_MISSING,
                "spec.remoteStorage.endpoint is empty; External ownership requires the "
                "operator-managed endpoint.",
            ),
            "",
        )
    error = endpoint_shape_error(provider, endpoint)
    if error:
        return (
            Verdict(
                False,
                c.REASON_EXTERNAL_ENDPOINT_INVALID,
                f"spec.remoteStorage.endpoint: {error}",
            ),
            endpoint,
        )
    return (
        Verdict(
            True,
            c.REASON_EXTERNAL_ENDPOINT_ACCEPTED,
            f"External {provider} endpoint {endpoint} accepted.",
        ),
        endpoint,
    )
