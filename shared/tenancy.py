"""Cross-namespace consent: which consumers of other namespaces a managed tier admits.

A managed tier (Redis, LMCache server) answers its own backend's engines. Another
namespace's engines get in only when both sides say so (docs/decisions.md,
"Cross-namespace consumers need the owner's consent"):

- the owning backend names the namespace in the annotation
  ``inferencecache.io/allowed-consumer-namespaces: "ns-a,ns-b"``;
- a consumer backend in that namespace points at the tier: External ownership, the
  same provider, ``spec.allowCrossNamespace: true`` and an endpoint that resolves to
  the tier's Service (``<service>.<owner namespace>.svc[.cluster.local]:<port>``).

The tier's NetworkPolicy then admits the consumer's engineSelector pods, the namespace
matched by ``kubernetes.io/metadata.name`` (set by the API server on every namespace:
it cannot be forged, unlike a pod label). Never an empty namespaceSelector.

Everything here is pure: the reconciler reads the backends and the objects, these
functions decide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared import constants as c
from shared.api.models import CacheBackend
from shared.backend_keys import BackendKey
from shared.endpoints import ServiceRef as ServiceRef
from shared.endpoints import service_reference as service_reference
from shared.objects import meta

# A namespace name: an RFC 1123 label.
_NAMESPACE_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAMESPACE_LENGTH: Final = 63


def consent_annotation_entries(value: str) -> list[str]:
    """The comma-separated entries of the consent annotation, trimmed (empty ones kept,
    so validation can name them)."""
    return [entry.strip() for entry in value.split(",")]


def consent_annotation_error(value: str) -> str | None:
    """Why the consent annotation's value is invalid, or None. Empty entries, names
    that are not namespace names (a wildcard included: consent is per namespace) and
    duplicates are refused."""
    if not value.strip():
        return 'must name at least one namespace ("ns-a,ns-b"); remove it to admit none'
    seen: set[str] = set()
    for entry in consent_annotation_entries(value):
        if not entry:
            return "has an empty entry; separate namespace names with single commas"
        if len(entry) > MAX_NAMESPACE_LENGTH or not _NAMESPACE_RE.match(entry):
            return (
                f"{entry!r} is not a namespace name (lowercase RFC 1123 label); consent is "
                "given per namespace, there is no wildcard"
            )
        if entry in seen:
            return f"names {entry!r} twice"
        seen.add(entry)
    return None


def allowed_consumer_namespaces(cb: CacheBackend) -> frozenset[str]:
    """The namespaces the owner consents to (an invalid annotation, which admission
    refuses, consents to none)."""
    value = (cb.metadata.annotations or {}).get(c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES)
    if value is None or consent_annotation_error(value) is not None:
        return frozenset()
    own = cb.metadata.namespace
    return frozenset(e for e in consent_annotation_entries(value) if e != own)


def tier_service_ref(service: Mapping[str, Any]) -> tuple[str, str, frozenset[int]]:
    """(name, namespace, ports) of a rendered or live Service."""
    view = meta(service)
    ports = frozenset(
        int(p["port"]) for p in (service.get("spec") or {}).get("ports") or [] if "port" in p
    )
    return view.name, view.namespace, ports


def points_at_tier(consumer: CacheBackend, provider: str, service: Mapping[str, Any]) -> bool:
    """``consumer`` is a cross-namespace consumer of the tier behind ``service``:
    External, the tier's provider, allowCrossNamespace, its endpoint the Service."""
    rs = consumer.spec.remote_storage
    if rs is None or rs.ownership != c.OWNERSHIP_EXTERNAL or rs.provider != provider:
        return False
    if not consumer.spec.allow_cross_namespace:
        return False
    ref = service_reference(rs.endpoint or "")
    name, namespace, ports = tier_service_ref(service)
    return (
        ref is not None
        and ref.name == name
        and ref.namespace == namespace
        and ref.port in ports
        and consumer.metadata.namespace != namespace
    )


def admitted_consumers(
    owner: CacheBackend,
    provider: str,
    service: Mapping[str, Any],
    candidates: Iterable[CacheBackend],
) -> list[CacheBackend]:
    """Rule "Owner consent, per namespace": the candidates the tier admits — in a
    namespace the owner names, pointing at its Service — sorted by namespace and name
    (a stable policy: the same consumers render the same object)."""
    allowed = allowed_consumer_namespaces(owner)
    chosen = [
        cb
        for cb in candidates
        if cb.metadata.namespace in allowed and points_at_tier(cb, provider, service)
    ]
    return sorted(chosen, key=lambda cb: (cb.metadata.namespace or "", cb.metadata.name or ""))


def consumer_peer(consumer: CacheBackend) -> dict[str, Any] | None:
    """The NetworkPolicy peer for a consumer's engines: its engineSelector pods in its
    namespace, matched by kubernetes.io/metadata.name. None for a nil or empty
    selector (it selects no engine)."""
    sel = consumer.spec.engine_selector
    labels = (sel.match_labels if sel else None) or {}
    if not labels:
        return None
    return {
        "namespaceSelector": {
            "matchLabels": {c.LABEL_NAMESPACE_NAME: consumer.metadata.namespace or ""}
        },
        "podSelector": {"matchLabels": dict(sorted(labels.items()))},
    }


# --------------------------------------------------------------------- consumer side


@dataclass(frozen=True)
class ConsumerStanding:
    """What a cross-namespace consumer can expect of the tier it points at: ``ok``,
    or the Ready=False reason and message that say why its engines are refused."""

    ok: bool
    reason: str = ""
    message: str = ""


def consumer_standing(
    consumer: CacheBackend,
    owner: CacheBackend | None,
    requires_auth: bool,
    credentials: bool,
) -> ConsumerStanding:
    """Rule "A refused consumer says so": a consumer whose tier's owner did not
    consent, or whose tier needs credentials we could not give it, is not Ready.

    ``owner``: the managed backend whose Service the endpoint names (None: the
    endpoint names no managed tier we know — not a consumer of ours, nothing to say);
    ``requires_auth``: the tier takes a password; ``credentials``: the consumer's copy
    of it is in place."""
    if owner is None:
        return ConsumerStanding(True)
    ns = consumer.metadata.namespace or ""
    tier = str(BackendKey(str(owner.metadata.namespace), str(owner.metadata.name)))
    if ns not in allowed_consumer_namespaces(owner):
        return ConsumerStanding(
            False,
            c.REASON_CROSS_NAMESPACE_CONSENT_MISSING,
            f"CacheBackend {tier} does not admit consumers from namespace {ns!r}: its "
            f"owner must add {ns!r} to the annotation "
            f"{c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES}; until then its NetworkPolicy "
            "refuses this backend's engines.",
        )
    if requires_auth and not credentials:
        return ConsumerStanding(
            False,
            c.REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING,
            f"The managed tier of CacheBackend {tier} requires a password and no copy of "
            f"its credentials is in namespace {ns!r} yet; its engines would be refused "
            "(NOAUTH).",
        )
    return ConsumerStanding(True)
