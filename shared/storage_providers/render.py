"""Pure rendering of the managed provider objects: password Secret, NetworkPolicy,
workload, Service and HPA.

``render_managed_objects(cb, live)`` is a function of the CacheBackend (and, for the one field another
controller owns — an autoscaled workload's replica count — and the password a live auth
Secret already holds, of the live objects; a missing password is drawn at random). It
returns the complete set of objects the controller wants to exist for that backend; anything owned by the
backend that is not in this list is shed by the reconciler. Every object carries a
controller owner reference to the CacheBackend and a hash of its own rendered form
(``inferencecache.io/spec-hash``), which lets the reconciler notice that a field it
used to set is no longer desired without diffing managedFields.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend, dump
from shared.bindings import Binding
from shared.objects import meta, metadata
from shared.quantity import parse_quantity
from shared.runtime_adapters import registry as runtime_registry
from shared.storage_providers.base import (
    AUTH_CONFIG_DIR,
    AUTH_CONFIG_KEY,
    AUTH_CONFIG_VOLUME,
    AUTH_PASSWORD_KEY,
    StorageProvider,
)
from shared.storage_providers.hardening import (
    container_env,
    container_security_context,
    default_pod_security_context,
    merge_pod_security_context,
    writable_mounts,
    writable_volumes,
)
from shared.storage_providers.registry import UnknownProviderError, select_provider
from shared.tenancy import allowed_consumer_namespaces, consumer_peer

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_CACHEBACKEND: Final = "inferencecache.io/cachebackend"
MANAGED_BY: Final = "inference-cache"
COMPONENT: Final = "cache-backend"
ANNOTATION_SPEC_HASH: Final = "inferencecache.io/spec-hash"

# The provider default when the typed resources block is omitted: bounded, and not
# persisted into the CR. An explicit `resources: {}` suppresses it.
DEFAULT_RESOURCES: Final[dict[str, dict[str, str]]] = {
    "requests": {"memory": "4Gi"},
    "limits": {"memory": "8Gi"},
}
# The HPA's utilisation maths divides by the CPU request; 0 or absent breaks it.
AUTOSCALING_CPU_REQUEST: Final = "250m"

# DNS-1035 labels (Service names) and label values are capped at 63 characters.
MAX_NAME_LENGTH: Final = 63


def _shorten(value: str, limit: int = MAX_NAME_LENGTH) -> str:
    """``value`` if it fits, else a prefix plus a stable hash suffix (still unique)."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{value[: limit - 11].rstrip('-.')}-{digest}"


def safe_label_value(value: str) -> str:
    return _shorten(value)


def resource_name(cb_name: str, provider: StorageProvider) -> str:
    """``<backend>-<component>``: one name per provider, so a provider switch renders a
    fresh object instead of fighting an immutable selector on the old one."""
    return _shorten(f"{cb_name}-{provider.component}")


def selector_labels(cb_name: str, provider: StorageProvider) -> dict[str, str]:
    return {LABEL_CACHEBACKEND: safe_label_value(cb_name), LABEL_NAME: provider.component}


def object_labels(cb_name: str, provider: StorageProvider) -> dict[str, str]:
    return {
        **selector_labels(cb_name, provider),
        LABEL_INSTANCE: safe_label_value(cb_name),
        LABEL_COMPONENT: COMPONENT,
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def owned_selector(cb_name: str) -> str:
    """Label selector that finds every object rendered for a backend."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CACHEBACKEND}={safe_label_value(cb_name)}"


def owner_reference(cb: CacheBackend) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": cb.metadata.name,
        "uid": cb.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --------------------------------------------------------------------- selection


def managed_provider(cb: CacheBackend) -> StorageProvider | None:
    """The provider whose workload the controller must run, or None.

    None for host-only, External ownership, events-only, an unsupported
    (runtime, type) pair, and a provider binding the runtime adapter does not
    accept — none of those has anything that would dial a managed server.
    """
    spec = cb.spec
    rs = spec.remote_storage
    if rs is None or rs.provider is None:
        return None
    if rs.ownership == c.OWNERSHIP_EXTERNAL:
        return None
    if effective.integration_mode(spec) == c.MODE_EVENTS_ONLY:
        return None
    adapter = runtime_registry.select_adapter(spec.runtime, effective.cache_type(spec))
    if adapter is None:
        return None
    try:
        provider = select_provider(rs.provider)
    except UnknownProviderError:
        return None
    if not adapter.supports_binding(Binding(protocol=provider.protocol, endpoint="")):
        return None
    return provider


# --------------------------------------------------------------------- pod spec


def container_resources(cb: CacheBackend, provider: StorageProvider) -> dict[str, Any]:
    """Resources of the managed container (autoscaling CPU-request fallback applied).

    Always a fresh deep copy: the CacheBackend may come from a shared cache and
    writing through it would corrupt it for every later reader.
    """
    typed = provider.resources(cb.spec)
    if typed is None:
        resources: dict[str, Any] = copy.deepcopy(DEFAULT_RESOURCES)
    else:
        resources = copy.deepcopy(dump(typed))
        # claims are rejected at admission; an empty list carries nothing to render.
        if not resources.get("claims"):
            resources.pop("claims", None)
    if cb.spec.autoscaling is not None:
        requests = resources.get("requests") or {}
        cpu = requests.get("cpu")
        if cpu is None or parse_quantity(cpu) <= 0:
            requests = dict(requests)
            requests["cpu"] = AUTOSCALING_CPU_REQUEST
            resources["requests"] = requests
    return resources


def _container(cb: CacheBackend, provider: StorageProvider) -> dict[str, Any]:
    resources = container_resources(cb, provider)
    command, args = provider.command_and_args(cb.spec, resources)
    container: dict[str, Any] = {
        "name": provider.container_name,
        "image": provider.image(cb.spec),
    }
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    env = container_env(provider)
    if env:
        container["env"] = env
    container["ports"] = [
        {"name": p.name, "containerPort": p.port, "protocol": "TCP"}
        for p in provider.container_ports
    ]
    container["resources"] = resources
    container["readinessProbe"] = provider.readiness_probe()
    container["securityContext"] = container_security_context(provider)
    mounts = writable_mounts(provider)
    if provider.requires_auth:
        mounts.append(auth_config_mount())
    if mounts:
        container["volumeMounts"] = mounts
    return container


def apply_template_overrides(pod_spec: dict[str, Any], cb: CacheBackend) -> dict[str, Any]:
    """Merge spec.template (a narrow pod-level override surface) over the defaults.

    The override fields (scheduling, identity, security) never collide with what a
    provider sets (containers, volumes, hostNetwork, dnsPolicy), so a key-wise merge is
    exact, except securityContext, which we set too: it is merged field by field
    (merge_pod_security_context).
    """
    if cb.spec.template is None:
        return pod_spec
    out = dict(pod_spec)
    for key, value in dump(cb.spec.template).items():
        if value is None:
            continue
        if key == "securityContext":
            out[key] = merge_pod_security_context(out.get(key) or {}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def render_pod_spec(cb: CacheBackend, provider: StorageProvider) -> dict[str, Any]:
    """The provider pod: hardened (shared.storage_providers.hardening), then the
    operator's template merged over it."""
    pod_spec: dict[str, Any] = {
        # A cache server never calls the API server: no token to steal.
        "automountServiceAccountToken": False,
        "securityContext": default_pod_security_context(provider),
        "containers": [_container(cb, provider)],
    }
    volumes = writable_volumes(provider)
    if provider.requires_auth:
        volumes.append(auth_config_volume(cb.metadata.name or ""))
    if volumes:
        pod_spec["volumes"] = volumes
    if provider.host_network:
        pod_spec["hostNetwork"] = True
        # Without it a hostNetwork pod resolves with the node's resolv.conf and
        # cannot find cluster Services.
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return apply_template_overrides(pod_spec, cb)


# --------------------------------------------------------------------- objects


def _metadata(cb: CacheBackend, provider: StorageProvider) -> dict[str, Any]:
    name = cb.metadata.name or ""
    return {
        "name": resource_name(name, provider),
        "namespace": cb.metadata.namespace,
        "labels": object_labels(name, provider),
        "ownerReferences": [owner_reference(cb)],
    }


def render_workload(
    cb: CacheBackend, provider: StorageProvider, auth_digest: str | None = None
) -> dict[str, Any]:
    """The provider's Deployment or StatefulSet. ``auth_digest`` (providers that require
    auth): a digest of the current password, on the pod template so a new password
    rolls the pods that were started with the old one."""
    name = cb.metadata.name or ""
    kind = effective.deployment_kind(cb.spec)
    spec: dict[str, Any] = {}
    # With an HPA the replica count belongs to the HPA: render() sets it apart from the
    # rest (see hpa_owned_replicas), outside the spec hash.
    if cb.spec.autoscaling is None:
        spec["replicas"] = effective.replicas(cb.spec)
    spec["selector"] = {"matchLabels": selector_labels(name, provider)}
    if kind == c.DEPLOYMENT_KIND_STATEFULSET:
        spec["serviceName"] = resource_name(name, provider)
    elif provider.recreate_strategy:
        spec["strategy"] = {"type": "Recreate"}
    template_meta: dict[str, Any] = {"labels": object_labels(name, provider)}
    if auth_digest is not None:
        template_meta["annotations"] = {c.ANNOTATION_AUTH_DIGEST: auth_digest}
    spec["template"] = {"metadata": template_meta, "spec": render_pod_spec(cb, provider)}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": _metadata(cb, provider),
        "spec": spec,
    }


def render_service(cb: CacheBackend, provider: StorageProvider) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if provider.headless_service:
        spec["clusterIP"] = "None"
    spec["selector"] = selector_labels(cb.metadata.name or "", provider)
    spec["ports"] = [
        {"name": p.name, "port": p.port, "targetPort": p.port, "protocol": "TCP"}
        for p in provider.service_ports
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cb, provider),
        "spec": spec,
    }


# --------------------------------------------------------------------- isolation
#
# A managed tier answers only its own engines: a NetworkPolicy admits the pods the
# backend's engineSelector selects on the data port (nothing else), and a provider that
# speaks a password (Redis) gets a random one from a Secret owned by the backend. The
# password never appears in a pod spec nor on a command line: the server reads it from
# a config file mounted from that Secret, clients from a secretKeyRef env var their
# own library reads.

AUTH_SECRET_SUFFIX: Final = "redis-auth"
COPY_SECRET_SUFFIX: Final = "redis-auth-copy"
#: On a consumer's copy of another namespace's password: the Secret it copies,
#: ``<namespace>/<name>``. The marker no managed tier's password is ever taken from.
ANNOTATION_COPY_OF: Final = "inferencecache.io/credentials-copy-of"
#: On a managed tier's password Secret: the namespaces its owner consented to while
#: this password was in force (comma-separated, sorted; empty: none). A namespace that
#: leaves the consent rotates the password (consent_revoked).
ANNOTATION_SHARED_WITH: Final = "inferencecache.io/password-shared-with"
#: The Secret key holding the random key of the pod template's auth digest.
AUTH_DIGEST_KEY_KEY: Final = "digest-key"


def auth_secret_name(cb_name: str) -> str:
    """``<backend>-redis-auth``: derived from the backend alone, so the Pod webhook
    names the same Secret the reconciler creates."""
    return _shorten(f"{cb_name}-{AUTH_SECRET_SUFFIX}")


def copy_secret_name(cb_name: str) -> str:
    """``<consumer>-redis-auth-copy``: a cross-namespace consumer's copy of its tier's
    password. Never a managed tier's own name (that ends in ``-redis-auth``), so a
    backend that later runs its own Redis never finds the copy under its name."""
    return _shorten(f"{cb_name}-{COPY_SECRET_SUFFIX}")


def owned_secret_names(cb_name: str) -> tuple[str, ...]:
    """Every Secret name a backend may own in its namespace: its managed Redis's
    password Secret, and a consumer's copy of another namespace's (also found under the
    first name when it was made before copies had their own). The reconciler reads
    owned Secrets by these names only."""
    return (auth_secret_name(cb_name), copy_secret_name(cb_name))


# Readable by whatever user the server image drops to; the volume is the pod's own.
AUTH_CONFIG_MODE: Final = 0o444


def auth_config_volume(cb_name: str) -> dict[str, Any]:
    """The Secret volume holding only the server's config file (not the bare password)."""
    return {
        "name": AUTH_CONFIG_VOLUME,
        "secret": {
            "secretName": auth_secret_name(cb_name),
            "items": [{"key": AUTH_CONFIG_KEY, "path": AUTH_CONFIG_KEY}],
            "defaultMode": AUTH_CONFIG_MODE,
        },
    }


def auth_config_mount() -> dict[str, Any]:
    return {"name": AUTH_CONFIG_VOLUME, "mountPath": AUTH_CONFIG_DIR, "readOnly": True}


def new_password() -> str:
    """256 random bits, hex: safe in a Redis config word, a JSON string and a URL."""
    return secrets.token_hex(32)


def _secret_value(secret: Mapping[str, Any] | None, key: str) -> str | None:
    """A Secret's ``key``, decoded; None when absent, empty or undecodable."""
    encoded = ((secret or {}).get("data") or {}).get(key)
    if not isinstance(encoded, str) or not encoded:
        return None
    try:
        value = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return value or None


def secret_password(secret: Mapping[str, Any] | None) -> str | None:
    """The password a live auth Secret holds; None when absent, empty or undecodable."""
    return _secret_value(secret, AUTH_PASSWORD_KEY)


def secret_digest_key(secret: Mapping[str, Any] | None) -> str | None:
    """The key of the auth digest a live auth Secret holds (AUTH_DIGEST_KEY_KEY)."""
    return _secret_value(secret, AUTH_DIGEST_KEY_KEY)


def is_credentials_copy(secret: Mapping[str, Any] | None) -> bool:
    """Rule "No managed tier adopts a copy": a Secret is a consumer's copy when it
    carries the marker (ANNOTATION_COPY_OF), or has the shape copies had before the
    marker: a password without the server config a tier's own Secret always holds.
    Never one that carries a tier's record of consent (ANNOTATION_SHARED_WITH), which
    only a tier's own Secret gets: once the tier has written its own password over a
    copy, an annotation another writer left on it changes nothing."""
    if secret is None:
        return False
    annotations = meta(secret).annotations
    if ANNOTATION_SHARED_WITH in annotations:
        return False
    if ANNOTATION_COPY_OF in annotations:
        return True
    data = secret.get("data") or {}
    return AUTH_PASSWORD_KEY in data and AUTH_CONFIG_KEY not in data


def shared_with(secret: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The namespaces a tier's password was shared with (ANNOTATION_SHARED_WITH); None
    when the Secret does not say (absent, or from before the record was kept)."""
    value = meta(secret).annotations.get(ANNOTATION_SHARED_WITH)
    if not isinstance(value, str):
        return None
    return frozenset(x.strip() for x in value.split(",") if x.strip())


def consent_revoked(shared: frozenset[str] | None, consent: frozenset[str]) -> bool:
    """Rule "Revoking consent rotates the password": a namespace the password was shared
    with is no longer consented to. Unknown (None: a Secret from before the record) is
    not a revocation: the record starts from the consent of the day."""
    return shared is not None and not shared <= consent


@dataclass(frozen=True)
class TierPassword:
    """What a managed tier's password Secret holds: the password, the key of its pod
    template digest, and the consent it is shared under."""

    password: str
    digest_key: str
    shared_with: frozenset[str]


def tier_password(
    cb: CacheBackend, live: LiveObjects | None, generate: Callable[[], str] = new_password
) -> TierPassword:
    """The password a managed tier keeps: the live Secret's, for as long as it is valid
    (an operator rotates it by writing a new one, or deleting the Secret or its key),
    is the tier's own (never a consumer's copy: is_credentials_copy) and no consent it
    was shared under has been withdrawn (consent_revoked); a fresh random one otherwise.
    The digest key is kept while the Secret holds one, drawn once otherwise."""
    secret = (live or {}).get(("Secret", auth_secret_name(cb.metadata.name or "")))
    own = None if is_credentials_copy(secret) else secret
    consent = allowed_consumer_namespaces(cb)
    password = secret_password(own)
    if password is None or consent_revoked(shared_with(own), consent):
        password = generate()
    key = secret_digest_key(own) or generate()
    return TierPassword(password, key, consent)


def password_digest(password: str, key: str) -> str:
    """What the pod template carries to roll on a new password: HMAC-SHA256 of it under
    the random key kept beside it in the Secret, so the annotation (readable by anyone
    who may read the workload) cannot be used to test guesses of a chosen password."""
    return hmac.new(key.encode(), password.encode(), hashlib.sha256).hexdigest()


def render_auth_secret(
    cb: CacheBackend, provider: StorageProvider, tier: TierPassword
) -> dict[str, Any]:
    """The backend's password Secret. ``data`` stays outside the spec hash (added after
    it is stamped): the password is random, the rest of the object is not."""
    name = cb.metadata.name or ""
    raw_meta = _metadata(cb, provider)
    raw_meta["name"] = auth_secret_name(name)
    raw_meta["annotations"] = {ANNOTATION_SHARED_WITH: ",".join(sorted(tier.shared_with))}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": raw_meta,
        "type": "Opaque",
        "data": {
            AUTH_PASSWORD_KEY: _b64(tier.password),
            AUTH_CONFIG_KEY: _b64(provider.auth_config(tier.password)),
            AUTH_DIGEST_KEY_KEY: _b64(tier.digest_key),
        },
    }


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def render_credentials_copy(
    consumer: CacheBackend, provider: StorageProvider, password: str, source: str
) -> dict[str, Any]:
    """A cross-namespace consumer's copy of its tier's password, in its own namespace
    (a pod cannot reference another namespace's Secret), owned by the consumer's
    backend, under the name the Pod webhook wires (copy_secret_name of the consumer),
    marked with the Secret it copies (``source``: ``<namespace>/<name>``). Only the
    password key: the server config file and the digest key are the owner's alone."""
    raw_meta = _metadata(consumer, provider)
    raw_meta["name"] = copy_secret_name(consumer.metadata.name or "")
    raw_meta["annotations"] = {ANNOTATION_COPY_OF: source}
    copy_ = {"apiVersion": "v1", "kind": "Secret", "metadata": raw_meta, "type": "Opaque"}
    stamped = _stamp_hash(copy_)
    stamped["data"] = {AUTH_PASSWORD_KEY: _b64(password)}
    return stamped


def network_policy_skipped(cb: CacheBackend) -> bool:
    """The operator's explicit opt-out: ``inferencecache.io/skip-network-policy: "true"``
    (validated at admission to "true" or "false"; anything else keeps the policy)."""
    value = (cb.metadata.annotations or {}).get(c.ANNOTATION_SKIP_NETWORK_POLICY) or ""
    return value.strip().lower() == "true"


def engine_peer(cb: CacheBackend) -> dict[str, Any] | None:
    """The NetworkPolicy peer that stands for the backend's engines: the pods its
    engineSelector selects, in its own namespace only (spec.allowCrossNamespace is a
    consumer's acknowledgement, never the owner's consent: shared.tenancy). None when
    the selector is nil or empty: it selects no engine (the Pod webhook never matches
    it), so nothing is admitted."""
    labels = (cb.spec.engine_selector.match_labels if cb.spec.engine_selector else None) or {}
    if not labels:
        return None
    return {"podSelector": {"matchLabels": dict(sorted(labels.items()))}}


#: Both directions are isolated: ingress only from the engine peers, no egress at all.
NETWORK_POLICY_TYPES: Final = ("Ingress", "Egress")


def render_network_policy(
    cb: CacheBackend, provider: StorageProvider, consumers: Sequence[CacheBackend] = ()
) -> dict[str, Any] | None:
    """The NetworkPolicy isolating the provider's pods, or None (host-network provider,
    or the opt-out). It selects exactly the pods of the provider's workload; ingress on
    the Service ports comes only from the engine peer and from the engines of the
    ``consumers`` of other namespaces the owner consented to (shared.tenancy.
    admitted_consumers); no other rule, so every other source is refused where the
    network plugin enforces NetworkPolicy; and no egress rule, so the pods dial nothing."""
    if not provider.network_policy or network_policy_skipped(cb):
        return None
    peers = [engine_peer(cb), *(consumer_peer(x) for x in consumers)]
    admitted = [peer for peer in peers if peer is not None]
    ingress: list[dict[str, Any]] = []
    if admitted:
        ingress.append(
            {
                "from": admitted,
                "ports": [{"protocol": "TCP", "port": p.port} for p in provider.service_ports],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(cb, provider),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(cb.metadata.name or "", provider)},
            "policyTypes": list(NETWORK_POLICY_TYPES),
            "ingress": ingress,
            # No egress rule: a cache server only answers (replies to an admitted
            # connection are not egress) and never dials out, not even DNS.
            "egress": [],
        },
    }


HPA_MIN_REPLICAS_FALLBACK: Final = 1


def hpa_min_replicas(cb: CacheBackend) -> int:
    """spec.autoscaling.minReplicas. The defaulter stamps it (= spec.replicas) on first
    apply only; a CR stored without it (admitted before the defaulter ran) gets the
    HPA's own floor of 1 — the spec's "the reconciler's HPA fallback silently picks 1"
    — never a value re-derived from a later spec.replicas."""
    a = cb.spec.autoscaling
    if a is not None and a.min_replicas is not None:
        return a.min_replicas
    return HPA_MIN_REPLICAS_FALLBACK


def render_hpa(cb: CacheBackend, provider: StorageProvider) -> dict[str, Any] | None:
    a = cb.spec.autoscaling
    if a is None:
        return None
    workload_name = resource_name(cb.metadata.name or "", provider)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(cb, provider),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": effective.deployment_kind(cb.spec),
                "name": workload_name,
            },
            "minReplicas": hpa_min_replicas(cb),
            "maxReplicas": a.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": effective.target_cpu_utilization_percent(cb.spec),
                        },
                    },
                }
            ],
        },
    }


def spec_hash(obj: dict[str, Any]) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _stamp_hash(obj: dict[str, Any]) -> dict[str, Any]:
    # A Secret's data is not hashed: the password is random (render_auth_secret).
    hashed = {k: v for k, v in obj.items() if k != "data"}
    metadata(obj).setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = spec_hash(hashed)
    return obj


LiveObjects = Mapping[tuple[str, str], Mapping[str, Any]]


def hpa_owned_replicas(cb: CacheBackend, live_workload: Mapping[str, Any] | None) -> int:
    """spec.replicas of an autoscaled workload.

    Created at the HPA floor (minReplicas), not at the API server's default of 1 that
    an HPA controller would only correct later. Once the workload exists its live
    value is kept: the HPA writes it through the scale subresource, and re-applying
    anything else would fight it (server-side apply with force would take it back).
    Sending the live value, rather than omitting the field, keeps it: a field our
    manager applied before and stops sending would be removed, i.e. reset to 1.
    """
    if live_workload is not None:
        replicas = (live_workload.get("spec") or {}).get("replicas")
        if isinstance(replicas, int) and not isinstance(replicas, bool):
            return replicas
    return hpa_min_replicas(cb)


def render_managed_objects(
    cb: CacheBackend,
    live: LiveObjects | None = None,
    generate_password: Callable[[], str] = new_password,
    consumers: Sequence[CacheBackend] = (),
) -> list[dict[str, Any]]:
    """Every object the controller wants for ``cb``: [] when nothing is managed.

    ``live`` maps (kind, name) to the owned objects as read, and only matters for what
    another controller owns — an autoscaled workload's replica count
    (hpa_owned_replicas) — and for the password a live auth Secret holds
    (tier_password; ``generate_password`` draws one, and the digest key, when needed).
    ``consumers``: the admitted consumers of other namespaces (their engines join the
    NetworkPolicy's peers).
    """
    provider = managed_provider(cb)
    if provider is None:
        return []
    objects: list[dict[str, Any]] = []
    digest: str | None = None
    if provider.requires_auth:
        # First: the Secret exists before the pods that read it, and before the
        # Service whose endpoint lets the Pod webhook wire engines with a reference to it.
        tier = tier_password(cb, live, generate_password)
        objects.append(render_auth_secret(cb, provider, tier))
        digest = password_digest(tier.password, tier.digest_key)
    policy = render_network_policy(cb, provider, consumers)
    if policy is not None:
        objects.append(policy)
    workload = render_workload(cb, provider, digest)
    objects += [workload, render_service(cb, provider)]
    hpa = render_hpa(cb, provider)
    if hpa is not None:
        objects.append(hpa)
    stamped = [_stamp_hash(o) for o in objects]
    if cb.spec.autoscaling is not None:
        # Outside the hash: the HPA moving it is not a re-render of ours.
        key = (workload["kind"], meta(workload).name)
        replicas = hpa_owned_replicas(cb, (live or {}).get(key))
        workload["spec"] = {"replicas": replicas, **workload["spec"]}
    return stamped


# --------------------------------------------------------------------- endpoint


def service_endpoint(service: dict[str, Any]) -> str:
    """status.endpoint of a managed backend, read from the live Service.

    ``<service>.<namespace>.svc:<first port>``: namespace-qualified so it resolves
    from engine pods in any namespace, and without the cluster domain so it works
    whatever the cluster's domain is (``svc`` is in every pod's search path).
    """
    view = meta(service)
    ports = (service.get("spec") or {}).get("ports") or []
    if not ports or not view.name:
        return ""
    return f"{view.name}.{view.namespace}.svc:{ports[0]['port']}"
