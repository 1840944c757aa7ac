"""shared.endpoints: spec "Externally owned remote storage" / remoteStorage.endpoint shapes
and "Cross-namespace endpoint requires opt-in"."""

from __future__ import annotations

import pytest

from shared.endpoints import endpoint_shape_error, service_namespace, strip_scheme


@pytest.mark.parametrize(
    ("provider", "endpoint"),
    [
        ("Redis", "redis:6379"),
        ("Redis", "  redis.cache.svc.cluster.local:6379  "),
        ("Redis", "10.0.0.7:6379"),
        ("Redis", "[::1]:6379"),
        ("Redis", "[fd00::1]:1"),
        ("Redis", "redis.example.com.:65535"),
        ("LMCacheServer", "lmcache:65432"),
        ("LMCacheServer", "lm://lmcache.cache-infra.svc:65432"),
        ("LMCacheServer", "lm://[::1]:65432"),
        ("Mooncake", "mooncake-master:50051"),
        ("Mooncake", "mooncakestore://10.0.12.7:50051"),
    ],
)
def test_valid_endpoint_shapes(provider: str, endpoint: str) -> None:
    """Bare host:port for all; lm:// for LMCacheServer; mooncakestore:// for Mooncake."""
    assert endpoint_shape_error(provider, endpoint) is None


@pytest.mark.parametrize(
    ("provider", "endpoint", "fragment"),
    [
        ("Redis", "", "empty"),
        ("Redis", "   ", "empty"),
        ("Redis", "redis", "port is required"),
        ("Redis", "redis:", "port is required"),
        ("Redis", "redis:0", "out of range"),
        ("Redis", "redis:65536", "out of range"),
        ("Redis", "redis:" + "1" * 5000, "out of range"),
        ("Redis", "redis:000000", "out of range"),
        ("Redis", "redis:http", "not numeric"),
        ("Redis", ":6379", "host is empty"),
        ("Redis", "red is:6379", "whitespace"),
        ("Redis", "redis:6379\t/0", "whitespace"),
        ("Redis", "redis:6379/0", "path, query or fragment"),
        ("Redis", "redis:6379?db=0", "path, query or fragment"),
        ("Redis", "redis:6379#x", "path, query or fragment"),
        ("Redis", "::1:6379", "must be bracketed"),
        ("Redis", "fd00::1", "must be bracketed"),
        ("Redis", "[::1]", "port is required"),
        ("Redis", "[::1:6379", "closing"),
        ("Redis", "[nope]:6379", "not an IPv6"),
        ("Redis", "300.1.1.1:6379", "IPv4"),
        ("Redis", "bad_host:6379", "host name"),
        ("Redis", "user:pw@redis:6379", "user information"),
        ("Redis", "redis://redis:6379", "scheme redis://"),
        ("Redis", "lm://redis:6379", "belongs to the LMCacheServer provider"),
        ("Redis", "mooncakestore://m:50051", "belongs to the Mooncake provider"),
        ("LMCacheServer", "mooncakestore://m:50051", "belongs to the Mooncake provider"),
        ("LMCacheServer", "http://lmcache:80", "scheme http://"),
        ("LMCacheServer", "lm://lmcache", "port is required"),
        ("LMCacheServer", "lm://lmcache:8080/path", "path"),
        ("Mooncake", "lm://lmcache:65432", "belongs to the LMCacheServer provider"),
        ("Mooncake", "redis://m:6379", "scheme redis://"),
        ("Mooncake", "://m:1", "malformed scheme"),
    ],
)
def test_invalid_endpoint_shapes(provider: str, endpoint: str, fragment: str) -> None:
    error = endpoint_shape_error(provider, endpoint)
    assert error is not None
    assert fragment in error


def test_foreign_scheme_error_names_the_scheme_and_accepted_shapes() -> None:
    """Spec: admission rejects schemes belonging to another provider, naming it."""
    error = endpoint_shape_error("Redis", "lm://x:1")
    assert error == (
        "scheme lm:// belongs to the LMCacheServer provider; the Redis provider accepts "
        "bare host:port"
    )


def test_strip_scheme_trims_and_drops_the_scheme() -> None:
    """Spec: External ownership uses the trimmed endpoint; bindings carry host:port."""
    assert strip_scheme("  lm://lmcache:65432 ") == "lmcache:65432"
    assert strip_scheme("mooncakestore://10.0.0.1:50051") == "10.0.0.1:50051"
    assert strip_scheme("redis:6379") == "redis:6379"
    assert strip_scheme("[::1]:6379") == "[::1]:6379"


@pytest.mark.parametrize(
    ("endpoint", "namespace"),
    [
        ("redis.team-b.svc:6379", "team-b"),
        ("redis.team-b.svc.cluster.local:6379", "team-b"),
        ("redis.team-b.svc.cluster.local.:6379", "team-b"),
        ("lm://lmcache.cache-infra.svc:65432", "cache-infra"),
        ("mooncakestore://master.mc.svc.cluster.local:50051", "mc"),
        ("redis-0.redis.team-b.svc.cluster.local:6379", "team-b"),
        ("REDIS.Team-B.SVC:6379", "team-b"),
        ("a.svc.svc.cluster.local:1", "svc"),
        # Two labels: the pod's "svc.<domain>" search domain makes them a Service.
        ("redis.team-b:6379", "team-b"),
        ("cache.internal:6379", "internal"),
        ("lm://rowner-lmcache.ml:65432", "ml"),
    ],
)
def test_service_namespace_of_service_dns(endpoint: str, namespace: str) -> None:
    """Spec "Cross-namespace endpoint requires opt-in": Service DNS names a namespace."""
    assert service_namespace(endpoint, "own") == namespace


@pytest.mark.parametrize(
    "endpoint",
    [
        "redis:6379",  # unqualified: resolves in the backend's own namespace
        "10.0.0.7:6379",
        "[::1]:6379",
        "redis.example.com:6379",  # external FQDN, three labels, no svc label
        "cache.team-b.svc.example.com:6379",  # external FQDN that merely has a svc label
        "redis.team-b.svc.corp.example:6379",  # custom cluster domain: opt in explicitly
        "redis.example.internal:6379",
        "cache.prod.us-east-1.example.com:6379",
        "example.com.:6379",  # absolute two-label name: not searched, not a Service
        "a.svc.cluster.local:6379",  # "svc" at position 1 names no namespace
        "not an endpoint",
        "",
    ],
)
def test_service_namespace_is_none_when_no_namespace_can_be_inferred(endpoint: str) -> None:
    """Spec: bare hostnames, IPs and unqualified names pass through; external FQDNs too."""
    assert service_namespace(endpoint, "own") is None
