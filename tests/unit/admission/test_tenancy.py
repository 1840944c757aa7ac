"""Cross-namespace consent (docs/decisions.md, "Cross-namespace consumers need the
owner's consent"), pure: the annotation's validation, which consumers a tier admits,
the policy peers they get, the consumer's standing and its credentials copy."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from shared import constants as c
from shared.api.models import CacheBackend
from shared.pod_wiring import resolve_binding
from shared.storage_providers.lmcache_server import LMCACHE_SERVER_PORT
from shared.storage_providers.redis import REDIS_PORT
from shared.storage_providers.registry import select_provider
from shared.storage_providers.render import (
    ANNOTATION_COPY_OF,
    render_credentials_copy,
    render_managed_objects,
)
from shared.tenancy import (
    ServiceRef,
    admitted_consumers,
    allowed_consumer_namespaces,
    consent_annotation_error,
    consumer_standing,
    service_reference,
)
from tests.builders import isolated_backend, network_policies
from tests.network_policy import PodRef, ingress_allowed

OWNER_NS = "team-a"
CONSENT = {c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: "team-b, team-c"}


def consumer(
    ns: str,
    endpoint: str,
    *,
    provider: str = c.PROVIDER_LMCACHE_SERVER,
    cross: bool = True,
    selector: dict[str, str] | None = None,
    name: str = "reader",
) -> CacheBackend:
    spec: dict[str, Any] = {
        "runtime": "VLLM",
        "engineSelector": {"matchLabels": selector or {"app": "vllm"}},
        "remoteStorage": {"provider": provider, "ownership": "External", "endpoint": endpoint},
    }
    if provider == c.PROVIDER_REDIS:
        spec["runtime"] = "SGLang"
    if cross:
        spec["allowCrossNamespace"] = True
    return CacheBackend.model_validate(
        {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}"}, "spec": spec}
    )


def owner(provider: str = c.PROVIDER_LMCACHE_SERVER, **annotations: str) -> CacheBackend:
    return isolated_backend(provider, annotations=dict(annotations) or None)


def service_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "Service")


def ns_pod(ns: str, labels: dict[str, str]) -> PodRef:
    """A pod as the network plugin sees it: its namespace carries the API server's
    kubernetes.io/metadata.name label."""
    return PodRef(ns, labels, {c.LABEL_NAMESPACE_NAME: ns})


LM_ENDPOINT = f"cache-lmcache-server.{OWNER_NS}.svc:{LMCACHE_SERVER_PORT}"


@pytest.mark.parametrize("value", ["team-b", "team-b,team-c", " team-b , team-c "])
def test_the_consent_annotation_names_namespaces(value: str) -> None:
    assert consent_annotation_error(value) is None


@pytest.mark.parametrize("value", ["", " ", "team-b,", "*", "Team-B", "team_b", "a,a", "x" * 64])
def test_the_consent_annotation_refuses_anything_else(value: str) -> None:
    """No wildcard, no empty entry, no duplicate: consent is per namespace."""
    assert consent_annotation_error(value) is not None


def test_an_invalid_annotation_consents_to_nobody() -> None:
    assert allowed_consumer_namespaces(
        owner(**{c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: "*"})
    ) == (frozenset())
    assert allowed_consumer_namespaces(owner(**CONSENT)) == {"team-b", "team-c"}


@pytest.mark.parametrize(
    ("endpoint", "ref"),
    [
        ("svc.ns.svc:1", ServiceRef("svc", "ns", 1)),
        ("lm://Svc.NS.svc.cluster.local.:2", ServiceRef("svc", "ns", 2)),
        ("svc.ns:1", ServiceRef("svc", "ns", 1)),
        ("Svc.NS:1", ServiceRef("svc", "ns", 1)),
        ("lm://svc.ns:2", ServiceRef("svc", "ns", 2)),
        ("svc.ns.svc.cluster.local:3", ServiceRef("svc", "ns", 3)),
        ("svc.ns.:1", None),
        ("svc.ns.svc.:1", None),
        ("svc:1", None),
        ("10.0.0.1:1", None),
        ("pod.svc.ns.svc:1", None),
        ("svc.ns.svc.example.com:1", None),
        ("svc.ns.svc", None),
    ],
)
def test_service_reference(endpoint: str, ref: ServiceRef | None) -> None:
    """Rule "Any Service form counts": every name an engine pod resolves to a Service of
    a named namespace is a reference; a bare name stays in the pod's own namespace."""
    assert service_reference(endpoint) == ref


def test_only_consenting_namespaces_pointing_at_the_service_are_admitted() -> None:
    """Rule "Owner consent, per namespace"."""
    own = owner(**CONSENT)
    service = service_of(render_managed_objects(own))
    candidates = [
        consumer("team-b", LM_ENDPOINT),  # consenting: admitted
        consumer("team-c", LM_ENDPOINT.replace(":65432", ":1")),  # another port
        consumer("team-c", LM_ENDPOINT, cross=False, name="no-ack"),  # no acknowledgement
        consumer("team-c", f"other.{OWNER_NS}.svc:65432", name="other-svc"),
        consumer("team-c", LM_ENDPOINT, provider=c.PROVIDER_REDIS, name="redis"),
        consumer("team-d", LM_ENDPOINT, name="stranger"),  # no consent
    ]
    admitted = admitted_consumers(own, c.PROVIDER_LMCACHE_SERVER, service, candidates)
    assert [(x.metadata.namespace, x.metadata.name) for x in admitted] == [("team-b", "reader")]


def test_the_policy_admits_the_consumers_engines_and_nobody_else() -> None:
    """Owner, consenting consumer, non-consenting and stranger namespaces, evaluated
    against the rendered policy; a pod that gives itself the engine labels elsewhere
    gets nothing."""
    own = owner(**CONSENT)
    service = service_of(render_managed_objects(own))
    admitted = admitted_consumers(
        own,
        c.PROVIDER_LMCACHE_SERVER,
        service,
        [consumer("team-b", LM_ENDPOINT, selector={"app": "b-engine"})],
    )
    objs = render_managed_objects(own, consumers=admitted)
    pols = network_policies(objs)
    workload = next(o for o in objs if o["kind"] == "Deployment")
    target = ns_pod(OWNER_NS, workload["spec"]["template"]["metadata"]["labels"])
    port = LMCACHE_SERVER_PORT
    assert ingress_allowed(pols, target, ns_pod(OWNER_NS, {"app": "engine"}), port)
    assert ingress_allowed(pols, target, ns_pod("team-b", {"app": "b-engine"}), port)
    assert not ingress_allowed(pols, target, ns_pod("team-b", {"app": "engine"}), port)
    assert not ingress_allowed(pols, target, ns_pod("team-c", {"app": "b-engine"}), port)
    assert not ingress_allowed(pols, target, ns_pod("stranger", {"app": "b-engine"}), port)
    assert not ingress_allowed(pols, target, ns_pod("stranger", {"app": "engine"}), port)
    assert '"namespaceSelector": {}' not in json.dumps(pols)
    peer = pols[0]["spec"]["ingress"][0]["from"][1]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}},
        "podSelector": {"matchLabels": {"app": "b-engine"}},
    }


def test_a_refused_consumer_says_why() -> None:
    """Rule "A refused consumer says so": no consent, or no credentials for a tier that
    needs them; the message names the namespace."""
    no_consent = consumer_standing(consumer("team-d", LM_ENDPOINT), owner(**CONSENT), False, False)
    assert (no_consent.ok, no_consent.reason) == (False, c.REASON_CROSS_NAMESPACE_CONSENT_MISSING)
    assert "'team-d'" in no_consent.message
    redis_owner = owner(c.PROVIDER_REDIS, **CONSENT)
    missing = consumer_standing(consumer("team-b", "x"), redis_owner, True, False)
    assert (missing.ok, missing.reason) == (False, c.REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING)
    assert "'team-b'" in missing.message
    assert consumer_standing(consumer("team-b", "x"), redis_owner, True, True).ok
    assert consumer_standing(consumer("team-b", "x"), None, True, False).ok


def test_the_credentials_copy_is_the_consumers_own() -> None:
    reader = consumer(
        "team-b", f"cache-redis.{OWNER_NS}.svc:{REDIS_PORT}", provider=c.PROVIDER_REDIS
    )
    source = f"{OWNER_NS}/cache-redis-auth"
    copy_ = render_credentials_copy(reader, select_provider(c.PROVIDER_REDIS), "pw", source)
    assert copy_["metadata"]["name"] == "reader-redis-auth-copy"
    assert copy_["metadata"]["annotations"][ANNOTATION_COPY_OF] == source
    assert copy_["metadata"]["namespace"] == "team-b"
    assert copy_["metadata"]["ownerReferences"][0]["uid"] == "uid-team-b"
    assert copy_["data"] == {"password": base64.b64encode(b"pw").decode()}


def test_the_consumers_engines_reference_the_copy_optionally() -> None:
    """A missing copy must not keep the engine pod from starting: optional reference."""
    reader = consumer(
        "team-b", f"cache-redis.{OWNER_NS}.svc:{REDIS_PORT}", provider=c.PROVIDER_REDIS
    )
    binding = resolve_binding(reader)
    assert binding is not None
    assert (binding.password_secret, binding.password_optional) == ("reader-redis-auth-copy", True)
    same_ns = consumer(
        OWNER_NS, f"cache-redis.{OWNER_NS}.svc:{REDIS_PORT}", provider=c.PROVIDER_REDIS
    )
    binding = resolve_binding(same_ns)
    assert binding is not None
    assert binding.password_secret is None
    unacknowledged = consumer(
        "team-b", f"cache-redis.{OWNER_NS}.svc:{REDIS_PORT}", provider=c.PROVIDER_REDIS, cross=False
    )
    binding = resolve_binding(unacknowledged)
    assert binding is not None
    assert binding.password_secret is None
