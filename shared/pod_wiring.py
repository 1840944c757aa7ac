"""The decision core of the mutating Pod webhook: which backend wires a pod, and how.

``wire_pod`` is a pure function of the pod, the CacheBackends of the cluster and the
webhook settings; ``wire_facts`` is the same over a pod already read by ``pod_facts``
(its shape, the opt-out, its namespace), which the webhook reads once per request. It never raises for a bad pod or backend: every problem becomes a
fail-open result (the pod admitted unwired), because a cache is an optimisation and must
never block engine admission.

Rules, each in its own function named after the spec:

- ``skip_inject_requested``: ``inferencecache.io/skip-inject`` with a truthy value —
  ``true``, ``t``, ``1``, ``yes`` or ``on``, trimmed and case-insensitive (Go's
  strconv.ParseBool truthy set plus yes/on; anything else, including ``false``, is not
  an opt-out) — skips wiring, clears a stale injected-by/injected-by-uid pair and stamps
  ``inject-skipped: skip-inject-annotation``.
- ``select_backend``: CacheBackends of the pod's namespace, sorted by metadata.name; the
  first whose ``spec.engineSelector.matchLabels`` is non-empty and contained in the pod's
  labels wins (a nil/empty selector never matches).
- ``resolve_binding``: independent of the runtime adapter. No remoteStorage: None
  (host-only). Managed: the Service the reconciler renders (``owned_service_endpoint``),
  once ``status.endpoint`` says it is published. External: the trimmed, provider-validated
  ``spec.remoteStorage.endpoint``, never status. An empty endpoint fails open.
- EventsOnly injects no connector, only the kvevent-subscriber; without a subscriber image
  or ``observation.modelID`` the pod is left unwired (fail-open).
- ``apply_engine_host_network``: Mooncake's ``integration.engineHostNetwork`` puts the pod
  on the host network only together with the connector (a mooncakestore binding).
- ``stamp_injected``: ``injected-by: <ns>/<name>`` and ``injected-by-uid: <uid>`` (both,
  always: an empty uid when the backend has none, e.g. a YAML file without
  metadata.uid, so a stale uid never vouches for this wiring); clears
  ``inject-skipped``; records the admitted kernel-check mode when the check is injected.
  Beside the annotations, the label ``inferencecache.io/injected-by-uid: <uid>``
  (``injected_by_uid_label``), so the reconciler can ask the API server for exactly a
  backend's injected pods; the annotations remain what decides.
- ``strip_decision_annotations``: every fail-open after the pod is decoded strips stale
  injected-by, injected-by-uid and inject-skipped — exactly the spec's three annotations
  — and the injected-by-uid label, so a pre-stamped pod template cannot impersonate a
  wired pod.
- ``stamp_metrics_scrape``: a pod wired for offload gets the label
  ``inferencecache.io/metrics: engine`` and the port annotations of
  ``shared.runtime_adapters.metrics_ports`` that the PodMonitor scrapes by; every other
  decision clears them. ``share_lmcache_metrics`` (vLLM + LMCache) sets
  ``PROMETHEUS_MULTIPROC_DIR`` on the engine unless the pod does, so LMCache's series
  reach vLLM's ``/metrics``.
- ``declined``: a pod an adapter declines (``InjectionDeclinedError``: a vLLM pod whose
  own ``--kv-offloading-size`` would overwrite the connector, a ``--kv-transfer-config``
  that cannot be read or names a connector the pod's vLLM does not register) fails open
  with the adapter's reason and warnings; the engine-offloading decline also records
  ``inject-declined: EngineOffloadingConflict`` and ``inject-declined-by: <ns>/<name>``
  on the pod, which every other decision clears.
- ``finish_injected``: a wiring that would make the Pod fail the API server's basic
  validation (duplicate names or mount paths, undeclared volumes, bad env names) fails
  open instead, since a rejected Pod is the opposite of fail-open.

Idempotency: the adapters and the sidecar renderers converge, so wiring an already
wired pod returns an equal pod (an empty JSON patch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from shared import constants as c
from shared import labels as shared_labels
from shared.api import effective
from shared.api.backend import Backend, read_backend_for_wiring
from shared.api.models import CacheBackend
from shared.backend_keys import BackendKey
from shared.bindings import PROVIDER_PROTOCOL, Binding
from shared.endpoints import endpoint_shape_error, strip_scheme
from shared.jsoncopy import json_copy
from shared.objects import meta
from shared.runtime_adapters import kernel_check, registry, subscriber
from shared.runtime_adapters.base import (
    InjectContext,
    InjectionDeclinedError,
    InjectionRejectedError,
    RuntimeAdapter,
)
from shared.runtime_adapters.engine import EngineLocator, candidate_indexes
from shared.runtime_adapters.host_memory_fit import host_memory_warnings
from shared.runtime_adapters.metrics_ports import metrics_ports, share_lmcache_metrics
from shared.runtime_adapters.overrides import apply_engine_overrides
from shared.runtime_adapters.podcheck import introduced_problems
from shared.runtime_adapters.podspec import cli_tokens, find_flag
from shared.storage_providers.registry import UnknownProviderError, select_provider
from shared.storage_providers.render import (
    auth_secret_name,
    copy_secret_name,
    render_service,
    service_endpoint,
)
from shared.tenancy import service_reference

OUTCOME_INJECTED: Final = "injected"
OUTCOME_SKIPPED: Final = "skipped"
OUTCOME_FAIL_OPEN: Final = "fail_open"

# Reasons: a closed vocabulary (they label Prometheus series).
REASON_INJECTED: Final = "injected"
REASON_EVENTS_ONLY: Final = "events_only"
REASON_SKIP_INJECT: Final = "skip_inject_annotation"
REASON_INVALID_POD: Final = "invalid_pod"
REASON_NO_MATCH: Final = "no_match"
REASON_INVALID_BACKEND: Final = "invalid_backend"
REASON_NO_ADAPTER: Final = "no_adapter"
REASON_MISSING_ENDPOINT: Final = "missing_endpoint"
REASON_INVALID_ENDPOINT: Final = "invalid_endpoint"
REASON_BINDING_NOT_SUPPORTED: Final = "binding_not_supported"
REASON_ADAPTER_REJECTED: Final = "adapter_rejected"
REASON_ADAPTER_ERROR: Final = "adapter_error"
REASON_SUBSCRIBER_REJECTED: Final = "subscriber_rejected"
REASON_EVENTS_ONLY_NO_SUBSCRIBER: Final = "events_only_no_subscriber"
REASON_INVALID_RESULT: Final = "invalid_result"
# The pod's own KV configuration keeps it unwired (shared.runtime_adapters.kv_config).
REASON_ENGINE_OFFLOADING: Final = c.WIRING_REASON_ENGINE_OFFLOADING
REASON_KV_CONFIG_INVALID: Final = c.WIRING_REASON_KV_CONFIG_INVALID
REASON_KV_CONNECTOR_UNREGISTERED: Final = c.WIRING_REASON_KV_CONNECTOR_UNREGISTERED
REASON_DISAGGREGATED_DECODE: Final = c.WIRING_REASON_DISAGGREGATED_DECODE
# Type VLLMOffloading's refusals (shared.runtime_adapters.vllm_offloading).
REASON_ENGINE_RELEASE: Final = c.WIRING_REASON_ENGINE_RELEASE
REASON_DEV_SHM: Final = c.WIRING_REASON_DEV_SHM
REASON_PARALLELISM_UNREADABLE: Final = c.WIRING_REASON_PARALLELISM_UNREADABLE
WIRING_REASONS: Final = (
    REASON_INJECTED,
    REASON_EVENTS_ONLY,
    REASON_SKIP_INJECT,
    REASON_INVALID_POD,
    REASON_NO_MATCH,
    REASON_INVALID_BACKEND,
    REASON_NO_ADAPTER,
    REASON_MISSING_ENDPOINT,
    REASON_INVALID_ENDPOINT,
    REASON_BINDING_NOT_SUPPORTED,
    REASON_ADAPTER_REJECTED,
    REASON_ADAPTER_ERROR,
    REASON_SUBSCRIBER_REJECTED,
    REASON_EVENTS_ONLY_NO_SUBSCRIBER,
    REASON_INVALID_RESULT,
    REASON_ENGINE_OFFLOADING,
    REASON_KV_CONFIG_INVALID,
    REASON_KV_CONNECTOR_UNREGISTERED,
    REASON_DISAGGREGATED_DECODE,
    REASON_ENGINE_RELEASE,
    REASON_DEV_SHM,
    REASON_PARALLELISM_UNREADABLE,
)

SKIP_INJECT_TRUTHY: Final = frozenset({"true", "t", "1", "yes", "on"})
DNS_CLUSTER_FIRST_WITH_HOST_NET: Final = "ClusterFirstWithHostNet"
# Where an object that names no namespace lives (API server / kubectl default).
DEFAULT_NAMESPACE: Final = "default"
# The spec's decision annotations: stripped on every fail-open after the pod is decoded.
DECISION_ANNOTATIONS: Final = (
    c.ANNOTATION_INJECTED_BY,
    c.ANNOTATION_INJECTED_BY_UID,
    c.ANNOTATION_INJECT_SKIPPED,
)
# The record of a pod an adapter declined (InjectionDeclinedError.declined) and of the
# backend that declined it: set by that decision only, cleared by every other.
DECLINED_ANNOTATIONS: Final = (c.ANNOTATION_INJECT_DECLINED, c.ANNOTATION_INJECT_DECLINED_BY)


@dataclass(frozen=True)
class WiringResult:
    pod: dict[str, Any]
    outcome: str  # injected | skipped | fail_open
    reason: str
    message: str
    backend: str | None = None  # <namespace>/<name> of the selected CacheBackend
    # Admission warnings: a wired container that cannot hold the host memory it pins;
    # why an adapter declined a pod (InjectionDeclinedError) on a fail-open.
    warnings: tuple[str, ...] = ()


class BindingError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# ------------------------------------------------------------------- annotations


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    """The pod's annotations; none when metadata or annotations is not a mapping (the
    API server never admits such a pod; offline callers report it before wiring)."""
    return dict(meta(pod).annotations)


def _set_annotations(pod: dict[str, Any], annotations: dict[str, str]) -> None:
    metadata = pod.setdefault("metadata", {})
    if annotations:
        metadata["annotations"] = annotations
    elif "annotations" in metadata:
        metadata.pop("annotations")


def _set_label(pod: dict[str, Any], key: str, value: str | None) -> None:
    """Set (or, with None, remove) one label, dropping an emptied labels map."""
    metadata = pod.setdefault("metadata", {})
    labels = dict(metadata.get("labels") or {})
    if value is None:
        if key not in labels:
            return
        labels.pop(key)
    elif labels.get(key) == value:
        return
    else:
        labels[key] = value
    if labels:
        metadata["labels"] = labels
    else:
        metadata.pop("labels", None)


def injected_by_uid_label(uid: str | None) -> str | None:
    """The injected-by-uid label value for a backend uid, or None when the uid is not a
    valid label value (a metadata.uid always is; a hand-written backend file may not
    be): no label is better than one the API server would reject."""
    if uid and shared_labels.valid_label_value(uid):
        return uid
    return None


def strip_decision_annotations(pod: dict[str, Any]) -> None:
    """Drop the webhook's decision annotations (and the injected-by-uid label, the
    engine-metrics label and port annotations) a pod may carry from its template."""
    annotations = _annotations(pod)
    stale = (
        *DECISION_ANNOTATIONS,
        *DECLINED_ANNOTATIONS,
        c.ANNOTATION_HOST_MEMORY_PROCESSES,
        c.ANNOTATION_VLLM_OFFLOADING,
    )
    if any(key in annotations for key in stale):
        _set_annotations(pod, {k: v for k, v in annotations.items() if k not in stale})
    _set_label(pod, c.LABEL_INJECTED_BY_UID, None)
    stamp_metrics_scrape(pod, {})


def stamp_injected(pod: dict[str, Any], backend: CacheBackend) -> None:
    annotations = _annotations(pod)
    annotations[c.ANNOTATION_INJECTED_BY] = str(
        BackendKey(str(backend.metadata.namespace), str(backend.metadata.name))
    )
    # Spec: TWO annotations on every successfully mutated pod. Without a uid (a backend
    # file without metadata.uid) it is empty, so a stale one never vouches for this wiring.
    annotations[c.ANNOTATION_INJECTED_BY_UID] = backend.metadata.uid or ""
    annotations.pop(c.ANNOTATION_INJECT_SKIPPED, None)
    for key in DECLINED_ANNOTATIONS:
        annotations.pop(key, None)
    mode = kernel_check.mode_on_pod(pod)
    if mode:
        annotations[c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE] = mode
    else:
        annotations.pop(c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE, None)
    if not divides_host_memory(backend):
        # Only the vLLM adapter divides the budget (and converges this annotation).
        annotations.pop(c.ANNOTATION_HOST_MEMORY_PROCESSES, None)
    if effective.cache_type(backend.spec) != c.TYPE_VLLM_OFFLOADING:
        # Only the VLLMOffloading adapter records (and converges) its decision.
        annotations.pop(c.ANNOTATION_VLLM_OFFLOADING, None)
    _set_annotations(pod, annotations)
    _set_label(pod, c.LABEL_INJECTED_BY_UID, injected_by_uid_label(backend.metadata.uid))


def divides_host_memory(backend: CacheBackend) -> bool:
    """Whether the backend's wiring divides its host-memory budget among the engine's
    processes (vLLM + LMCache, Offload)."""
    spec = backend.spec
    return (
        spec.runtime == c.RUNTIME_VLLM
        and effective.cache_type(spec) == c.TYPE_LMCACHE
        and effective.integration_mode(spec) != c.MODE_EVENTS_ONLY
    )


def skip_inject_requested(pod: dict[str, Any]) -> bool:
    value = _annotations(pod).get(c.ANNOTATION_SKIP_INJECT)
    return isinstance(value, str) and value.strip().lower() in SKIP_INJECT_TRUTHY


def skip_injection(pod: dict[str, Any]) -> dict[str, Any]:
    out = json_copy(pod)
    strip_decision_annotations(out)
    annotations = _annotations(out)
    annotations[c.ANNOTATION_INJECT_SKIPPED] = c.INJECT_SKIPPED_VALUE
    _set_annotations(out, annotations)
    return out


# --------------------------------------------------------------------- selection


def _selector(raw: dict[str, Any]) -> dict[str, Any]:
    spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
    selector = spec.get("engineSelector") if isinstance(spec, dict) else None
    labels = selector.get("matchLabels") if isinstance(selector, dict) else None
    return labels if isinstance(labels, dict) else {}


def backend_selects_pod(raw_backend: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    """Every matchLabels pair is on the pod; an empty selector claims nothing."""
    return shared_labels.labels_match(_selector(raw_backend), pod_labels)


def select_backend(
    backends: list[dict[str, Any]], namespace: str, pod_labels: dict[str, str]
) -> dict[str, Any] | None:
    """First match by metadata.name among the namespace's CacheBackends."""
    same_namespace = [b for b in backends if isinstance(b, dict) and meta(b).namespace == namespace]
    for raw in sorted(same_namespace, key=lambda b: meta(b).name):
        if backend_selects_pod(raw, pod_labels):
            return raw
    return None


def managed_password_secret(backend: CacheBackend) -> str | None:
    """The password Secret of a managed tier that requires one (Redis), by the name the
    reconciler gives it. Asked only once status.endpoint is published, which the
    reconciler does after it has created the Secret: an engine pod never refers to a
    Secret that does not exist yet. The pod is in the backend's namespace (a backend
    wires only its own namespace's pods), so the reference resolves."""
    remote = backend.spec.remote_storage
    if remote is None or remote.provider is None:
        return None
    try:
        provider = select_provider(remote.provider)
    except UnknownProviderError:
        return None
    if not provider.requires_auth:
        return None
    return auth_secret_name(backend.metadata.name or "")


def owned_service_endpoint(backend: CacheBackend, provider_name: str) -> str:
    """Rule "Managed endpoints come from what we own": the address of the Service the
    reconciler renders for a managed tier (``<service>.<namespace>.svc:<first port>``),
    derived from the backend's name, namespace and provider alone, as status.endpoint
    publishes it. status.endpoint is a subresource another writer may hold, so it only
    says that the tier is published, never where engines send their cache data."""
    try:
        provider = select_provider(provider_name)
    except UnknownProviderError:
        raise BindingError(
            REASON_INVALID_BACKEND, f"spec.remoteStorage.provider {provider_name!r} is unknown"
        ) from None
    endpoint = service_endpoint(render_service(backend, provider))
    if not endpoint:
        raise BindingError(REASON_INVALID_BACKEND, "the managed tier renders no Service port")
    return endpoint


def resolve_binding(backend: CacheBackend) -> Binding | None:
    """The structured provider Binding, resolved independently of the runtime adapter."""
    remote = backend.spec.remote_storage
    if remote is None:
        return None
    if remote.provider is None or remote.provider not in PROVIDER_PROTOCOL:
        raise BindingError(REASON_INVALID_BACKEND, "spec.remoteStorage.provider is not set")
    protocol = PROVIDER_PROTOCOL[remote.provider]
    if remote.ownership == c.OWNERSHIP_MANAGED:
        published = ((backend.status.endpoint if backend.status else None) or "").strip()
        if not published:
            raise BindingError(
                REASON_MISSING_ENDPOINT,
                "the managed remote storage has not published status.endpoint yet; roll the "
                "engine workload once the CacheBackend is Ready",
            )
        endpoint = owned_service_endpoint(backend, remote.provider)
        return Binding(protocol, endpoint, managed_password_secret(backend))
    if remote.ownership == c.OWNERSHIP_EXTERNAL:
        endpoint = (remote.endpoint or "").strip()
        if not endpoint:
            raise BindingError(REASON_MISSING_ENDPOINT, "spec.remoteStorage.endpoint is empty")
        error = endpoint_shape_error(remote.provider, endpoint)
        if error:
            raise BindingError(
                REASON_INVALID_ENDPOINT, f"spec.remoteStorage.endpoint is invalid: {error}"
            )
        copy_name = consumer_credentials_secret(backend)
        return Binding(
            protocol, strip_scheme(endpoint), copy_name, password_optional=copy_name is not None
        )
    raise BindingError(REASON_INVALID_BACKEND, "spec.remoteStorage.ownership is not set")


def consumer_credentials_secret(backend: CacheBackend) -> str | None:
    """For an External backend that acknowledges pointing at a Service of another
    namespace (allowCrossNamespace) of a provider that requires a password: the name of
    the credentials copy the reconciler keeps in the backend's namespace when that
    tier's owner consented (shared.tenancy), under its own name (copy_secret_name, never
    a managed tier's). Wired as an optional reference."""
    remote = backend.spec.remote_storage
    if remote is None or not backend.spec.allow_cross_namespace or remote.provider is None:
        return None
    ref = service_reference(remote.endpoint or "")
    if ref is None or ref.namespace == backend.metadata.namespace:
        return None
    try:
        provider = select_provider(remote.provider)
    except UnknownProviderError:
        return None
    return copy_secret_name(backend.metadata.name or "") if provider.requires_auth else None


# ----------------------------------------------------------------------- sidecars


def _engine_for_events(
    pod: dict[str, Any], adapter: RuntimeAdapter | None
) -> dict[str, Any] | None:
    """The engine container whose --kv-events-config the subscriber reads, best effort."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if isinstance(adapter, EngineLocator):
        try:
            return dict(containers[adapter.engine_container_index(pod)])
        except InjectionRejectedError:
            pass
    for i in candidate_indexes(pod):
        if find_flag(cli_tokens(containers[i]), subscriber.KV_EVENTS_CONFIG):
            return dict(containers[i])
    return None


def append_subscriber(
    pod: dict[str, Any],
    backend: CacheBackend,
    ctx: InjectContext,
    engine: dict[str, Any] | None,
    offload: bool,
) -> bool:
    """Converge the kvevent-subscriber sidecar; False when its gates are not met."""
    model_id = effective.model_id(backend.spec)
    if not ctx.kvevent_subscriber_image or not model_id:
        return False
    subscriber.converge_subscriber(
        pod,
        subscriber.render_subscriber(
            image=ctx.kvevent_subscriber_image,
            port=subscriber.kv_events_port(engine),
            server_address=ctx.server_address,
            model_id=model_id,
            runtime=backend.spec.runtime,
            offload=offload,
            engine=engine,
        ),
    )
    return True


def apply_engine_host_network(
    pod: dict[str, Any], backend: CacheBackend, binding: Binding | None
) -> None:
    """Mooncake's mesh is dialled from the engine: host networking, with the connector only."""
    if not effective.engine_host_network(backend.spec):
        return
    if binding is None or binding.protocol != "mooncakestore":
        return
    spec = pod.setdefault("spec", {})
    spec["hostNetwork"] = True
    spec["dnsPolicy"] = DNS_CLUSTER_FIRST_WITH_HOST_NET


def apply_overrides(
    original: dict[str, Any],
    wired: dict[str, Any],
    adapter: RuntimeAdapter,
    backend: CacheBackend,
    binding: Binding | None,
) -> None:
    """spec.integration.engineOverrides on the engine container, diffed before/after."""
    integration = backend.spec.integration
    overrides = integration.engine_overrides if integration else None
    if overrides is None or not isinstance(adapter, EngineLocator):
        return
    before = original["spec"]["containers"][adapter.engine_container_index(original)]
    containers = wired["spec"]["containers"]
    for i, container in enumerate(containers):
        if container.get("name") == before.get("name"):
            containers[i] = apply_engine_overrides(
                before,
                container,
                overrides,
                adapter.reserved_args,
                adapter.reserved_env,
                adapter.merged_env(binding),
            )
            return


# ------------------------------------------------------------------------- core


def _fail_open(
    pod: dict[str, Any],
    reason: str,
    message: str,
    backend: str | None = None,
    warnings: tuple[str, ...] = (),
) -> WiringResult:
    out = json_copy(pod)
    strip_decision_annotations(out)
    return WiringResult(out, OUTCOME_FAIL_OPEN, reason, message, backend, warnings)


def declined(pod: dict[str, Any], exc: InjectionDeclinedError, key: str) -> WiringResult:
    """The fail-open of a pod an adapter declined: its reason, its warnings, and, when
    the adapter names one, the declined record (the CamelCase reason and the backend)
    on the pod for the worker to count."""
    result = _fail_open(pod, exc.reason, str(exc), key, exc.warnings)
    if exc.declined:
        annotations = _annotations(result.pod)
        annotations[c.ANNOTATION_INJECT_DECLINED] = exc.declined
        annotations[c.ANNOTATION_INJECT_DECLINED_BY] = key
        _set_annotations(result.pod, annotations)
    return result


def _valid_pod_shape(pod: Any) -> str | None:
    if not isinstance(pod, dict):
        return "the object is not a Pod"
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list) or not containers:
        return "the Pod has no spec.containers"
    if not all(isinstance(ct, dict) for ct in containers):
        return "spec.containers holds a non-object"
    metadata = pod.get("metadata", {})
    if not isinstance(metadata, dict):
        return "metadata is not an object"
    if not isinstance(metadata.get("labels") or {}, dict):
        return "metadata.labels is not an object"
    if not isinstance(metadata.get("annotations") or {}, dict):
        return "metadata.annotations is not an object"
    return None


@dataclass(frozen=True)
class PodFacts:
    """What wiring reads of a pod, read once: its shape, the opt-out and the namespace
    whose CacheBackends may wire it. The webhook classifies a request with it before it
    lists, and the wiring takes the same facts after."""

    pod: dict[str, Any]
    namespace: Any  # the caller's, else the pod's metadata.namespace, else "default"
    shape_error: str | None  # why the API server would not hold this as a Pod
    skip_inject: bool  # the inferencecache.io/skip-inject opt-out


def pod_facts(pod: dict[str, Any], namespace: str | None = None) -> PodFacts:
    return PodFacts(
        pod=pod,
        namespace=namespace or meta(pod).namespace or DEFAULT_NAMESPACE,
        shape_error=_valid_pod_shape(pod),
        skip_inject=skip_inject_requested(pod),
    )


def wire_pod(
    pod: dict[str, Any],
    backends: list[dict[str, Any]],
    ctx: InjectContext,
    *,
    namespace: str | None = None,
) -> WiringResult:
    """Wire ``pod`` to its CacheBackend; ``namespace`` defaults to the pod's own, else
    ``default``."""
    if not isinstance(pod, dict):
        return WiringResult(pod, OUTCOME_FAIL_OPEN, REASON_INVALID_POD, "the object is not a Pod")
    return wire_facts(pod_facts(pod, namespace), backends, ctx)


def wire_facts(facts: PodFacts, backends: list[dict[str, Any]], ctx: InjectContext) -> WiringResult:
    """``wire_pod`` over a pod already read: shape, opt-out, selection, then the mode."""
    pod = facts.pod
    if facts.shape_error:
        if isinstance(pod.get("metadata", {}), dict):
            return _fail_open(pod, REASON_INVALID_POD, facts.shape_error)
        return WiringResult(pod, OUTCOME_FAIL_OPEN, REASON_INVALID_POD, facts.shape_error)

    if facts.skip_inject:
        return WiringResult(
            skip_injection(pod),
            OUTCOME_SKIPPED,
            REASON_SKIP_INJECT,
            f"{c.ANNOTATION_SKIP_INJECT} opts this pod out of cache wiring",
        )

    metadata = pod.get("metadata") or {}
    ns = facts.namespace
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    raw = select_backend(backends, ns, labels)
    if raw is None:
        return _fail_open(pod, REASON_NO_MATCH, f"no CacheBackend in {ns!r} selects this pod")
    key = str(BackendKey(ns, meta(raw).name))
    try:
        backend = read_backend_for_wiring(raw, ns)
    except ValidationError as exc:
        return _fail_open(
            pod,
            REASON_INVALID_BACKEND,
            f"CacheBackend {key} is invalid: {exc.error_count()} "
            f"error(s), first: {exc.errors()[0]['msg']}",
            key,
        )
    if effective.integration_mode(backend.model.spec) == c.MODE_EVENTS_ONLY:
        return wire_events_only(pod, backend, ctx)
    return wire_offload(pod, backend, ctx)


def wire_events_only(pod: dict[str, Any], selected: Backend, ctx: InjectContext) -> WiringResult:
    """Spec "Events-only mode": no connector, only the kvevent-subscriber when wired."""
    backend, key = selected.model, str(selected.key)
    if not ctx.kvevent_subscriber_image or not effective.model_id(backend.spec):
        missing = (
            "the webhook runs without --kvevent-subscriber-image"
            if not ctx.kvevent_subscriber_image
            else "spec.observation.modelID is not set"
        )
        return _fail_open(
            pod, REASON_EVENTS_ONLY_NO_SUBSCRIBER, f"events-only: {missing}; pod left unwired", key
        )
    adapter = registry.select_adapter(backend.spec.runtime, effective.cache_type(backend.spec))
    out = json_copy(pod)
    try:
        append_subscriber(out, backend, ctx, _engine_for_events(pod, adapter), offload=False)
    except InjectionRejectedError as exc:
        return _fail_open(pod, REASON_SUBSCRIBER_REJECTED, str(exc), key)
    stamp_metrics_scrape(out, {})  # no KV tier wired: nothing of it to scrape
    return finish_injected(
        pod, out, selected, REASON_EVENTS_ONLY, f"events-only: kvevent-subscriber from {key}"
    )


def wire_offload(pod: dict[str, Any], selected: Backend, ctx: InjectContext) -> WiringResult:
    backend, key = selected.model, str(selected.key)
    spec = backend.spec
    adapter = registry.select_adapter(spec.runtime, effective.cache_type(spec))
    if adapter is None:
        return _fail_open(
            pod,
            REASON_NO_ADAPTER,
            f"no runtime adapter for {spec.runtime}/{effective.cache_type(spec)}; supported: "
            f"{', '.join(registry.supported_pairs())}",
            key,
        )
    try:
        binding = resolve_binding(backend)
    except BindingError as exc:
        return _fail_open(pod, exc.reason, str(exc), key)
    if not adapter.supports_binding(binding):
        kind = binding.protocol if binding else "host-only"
        return _fail_open(
            pod,
            REASON_BINDING_NOT_SUPPORTED,
            f"{adapter.name} does not accept a {kind} binding",
            key,
        )
    try:
        out = adapter.inject(pod, backend, binding, ctx)
        share_lmcache_metrics(out, adapter)
        apply_overrides(pod, out, adapter, backend, binding)
    except InjectionDeclinedError as exc:
        return declined(pod, exc, key)
    except InjectionRejectedError as exc:
        return _fail_open(pod, REASON_ADAPTER_REJECTED, f"{adapter.name}: {exc}", key)
    except Exception as exc:  # an adapter bug must not block admission
        return _fail_open(
            pod, REASON_ADAPTER_ERROR, f"{adapter.name} failed: {type(exc).__name__}: {exc}", key
        )
    try:
        append_subscriber(out, backend, ctx, _engine_for_events(out, adapter), offload=True)
    except InjectionRejectedError as exc:
        return _fail_open(pod, REASON_SUBSCRIBER_REJECTED, str(exc), key)
    apply_engine_host_network(out, backend, binding)
    stamp_metrics_scrape(out, metrics_ports(out, adapter))
    return finish_injected(pod, out, selected, REASON_INJECTED, f"wired by {key} ({adapter.name})")


def finish_injected(
    original: dict[str, Any],
    wired: dict[str, Any],
    selected: Backend,
    reason: str,
    message: str,
) -> WiringResult:
    """Stamp the decision, unless wiring made the Pod invalid: a patch the API server
    rejects would block the engine's admission, so that too fails open."""
    key = str(selected.key)
    problems = introduced_problems(original, wired)
    if problems:
        return _fail_open(
            original,
            REASON_INVALID_RESULT,
            "wiring would make the Pod invalid: " + "; ".join(sorted(problems)),
            key,
        )
    stamp_injected(wired, selected.model)
    processes = _annotations(wired).get(c.ANNOTATION_HOST_MEMORY_PROCESSES) or ""
    if "unreadable" in processes:
        message += f"; host-memory budget sized for one engine process: {processes}"
    warnings = tuple(host_memory_warnings(wired))
    return WiringResult(wired, OUTCOME_INJECTED, reason, message, key, warnings)


# The engine-metrics label and port annotations: set on a pod wired for offload, removed
# from every other pod the webhook decides on, so the PodMonitor scrapes exactly the
# pods a CacheBackend wired.
METRICS_ANNOTATIONS: Final = (c.ANNOTATION_METRICS_PORT, c.ANNOTATION_CACHE_METRICS_PORT)


def stamp_metrics_scrape(pod: dict[str, Any], ports: dict[str, str]) -> None:
    """Label the pod for the PodMonitor and record the ports to scrape (``metrics_ports``);
    with no port, clear both, so re-admission converges either way."""
    annotations = {k: v for k, v in _annotations(pod).items() if k not in METRICS_ANNOTATIONS}
    annotations.update(ports)
    if annotations != _annotations(pod):
        _set_annotations(pod, annotations)
    _set_label(pod, c.LABEL_METRICS, c.LABEL_METRICS_ENGINE if ports else None)
