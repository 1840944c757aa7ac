"""Provider endpoint shapes: one check shared by admission, the Pod webhook and the reconciler.

Spec ("Externally owned remote storage", remoteStorage.endpoint): bare host:port is
portable across every provider; LMCacheServer also accepts lm://host:port, Mooncake
also accepts mooncakestore://host:port, Redis accepts only bare host:port. A numeric
port in 1-65535 is always required, embedded whitespace and URL path/query/fragment
components are rejected, IPv6 must be bracketed, and a scheme belonging to another
provider is rejected by name. The endpoint is trimmed first.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final

from shared import constants as c

# The one scheme each provider accepts besides bare host:port.
PROVIDER_SCHEMES: Final[dict[str, str | None]] = {
    c.PROVIDER_LMCACHE_SERVER: "lm",
    c.PROVIDER_MOONCAKE: "mooncakestore",
    c.PROVIDER_REDIS: None,
}
_SCHEME_OWNER: Final[dict[str, str]] = {
    scheme: provider for provider, scheme in PROVIDER_SCHEMES.items() if scheme
}

_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# A DNS label as resolvers accept it (RFC 1123, case-insensitive); "_" is not allowed.
_LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_WHITESPACE_RE = re.compile(r"\s")


def _accepted_shapes(provider: str) -> str:
    scheme = PROVIDER_SCHEMES.get(provider)
    if scheme:
        return f"host:port or {scheme}://host:port"
    return "bare host:port"


def _split_scheme(endpoint: str) -> tuple[str | None, str]:
    match = _SCHEME_RE.match(endpoint)
    if match is None:
        return None, endpoint
    return match.group(1).lower(), endpoint[match.end() :]


def strip_scheme(endpoint: str) -> str:
    """The trimmed endpoint without its scheme: ``" lm://a:1 "`` -> ``"a:1"``."""
    return _split_scheme(endpoint.strip())[1]


def _split_host_port(authority: str) -> tuple[str, str] | str:
    """(host, port) of a host:port authority, or an error message."""
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return "IPv6 address is missing its closing ']'"
        host, rest = authority[1:close], authority[close + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} inside brackets is not an IPv6 address"
        if not rest.startswith(":"):
            return "a numeric port is required (host:port)"
        return f"[{host}]", rest[1:]
    host, sep, port = authority.rpartition(":")
    if not sep:
        return "a numeric port is required (host:port)"
    if ":" in host:
        return "IPv6 addresses must be bracketed, e.g. [::1]:6379"
    return host, port


def _host_error(host: str) -> str | None:
    if host.startswith("["):
        return None  # checked while splitting
    if not host:
        return "host is empty"
    name = host[:-1] if host.endswith(".") else host  # an absolute FQDN may end in "."
    labels = name.split(".")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return f"{host!r} is not a valid IPv4 address"
        return None
    if len(name) > 253:
        return "host name is longer than 253 characters"
    for label in labels:
        if not _LABEL_RE.fullmatch(label):
            return f"{host!r} is not a valid host name"
    return None


def endpoint_shape_error(provider: str, endpoint: str) -> str | None:
    """Why ``endpoint`` is not a valid address for ``provider``; None when it is valid."""
    value = endpoint.strip()
    if not value:
        return "endpoint is empty"
    if _WHITESPACE_RE.search(value):
        return "endpoint must not contain whitespace"
    scheme, authority = _split_scheme(value)
    if scheme is not None:
        accepted = PROVIDER_SCHEMES.get(provider)
        if scheme != accepted:
            owner = _SCHEME_OWNER.get(scheme)
            if owner is not None:
                return (
                    f"scheme {scheme}:// belongs to the {owner} provider; the {provider} "
                    f"provider accepts {_accepted_shapes(provider)}"
                )
            return (
                f"scheme {scheme}:// is not accepted; the {provider} provider accepts "
                f"{_accepted_shapes(provider)}"
            )
    elif "://" in value:
        return f"malformed scheme; the {provider} provider accepts {_accepted_shapes(provider)}"
    if any(ch in authority for ch in "/?#"):
        return (
            "endpoint must not contain a URL path, query or fragment; "
            f"the {provider} provider accepts {_accepted_shapes(provider)}"
        )
    if "@" in authority:
        return "endpoint must not contain user information (user@)"
    split = _split_host_port(authority)
    if isinstance(split, str):
        return split
    host, port = split
    host_error = _host_error(host)
    if host_error:
        return host_error
    if not port:
        return "a numeric port is required (host:port)"
    if not (port.isascii() and port.isdigit()):
        return f"port {port!r} is not numeric"
    if len(port.lstrip("0")) > 5 or not 1 <= int(port) <= 65535:
        shown = port if len(port) <= 12 else port[:12] + "..."
        return f"port {shown} is out of range 1-65535"
    return None


def _host_of(endpoint: str) -> str | None:
    split = _split_host_port(strip_scheme(endpoint))
    if isinstance(split, str):
        return None
    return split[0]


CLUSTER_DOMAIN: Final = "cluster.local"


@dataclass(frozen=True)
class ServiceRef:
    """The Service an endpoint names: ``<name>.<namespace>`` and a port."""

    name: str
    namespace: str
    port: int


def _searched_service_labels(host: str) -> list[str] | None:
    """``[service, namespace]`` when ``host`` resolves, from an engine pod, to a Service
    of a named namespace; None otherwise.

    Every pod's resolver searches ``<own ns>.svc.<domain>``, ``svc.<domain>`` and
    ``<domain>`` (ClusterFirst DNS, ndots 5), so these all reach Service ``s`` of
    namespace ``n``:

    * ``s.n`` (through ``svc.<domain>``), ``s.n.svc`` (through ``<domain>``),
      ``s.n.svc.cluster.local`` (as written), any letter case;
    * ``s.n.svc.cluster.local.`` (absolute). An absolute ``s.n.`` or ``s.n.svc.`` is
      not searched, so it names no Service.

    A bare ``s`` resolves through the first search domain, the pod's own namespace:
    the engines a backend wires are in the backend's namespace, so it never crosses.
    The service label must start with a letter (RFC 1035, as Service names do), which
    keeps IPv4 addresses out."""
    if host.startswith("["):
        return None
    name = host.lower()
    absolute = name.endswith(".")
    name = name.removesuffix(".")
    qualified = name.endswith("." + CLUSTER_DOMAIN)
    name = name.removesuffix("." + CLUSTER_DOMAIN)
    labels = name.split(".")
    if not all(_LABEL_RE.fullmatch(label) for label in labels) or not labels[0][0].isalpha():
        return None
    if len(labels) == 3 and labels[2] == "svc" and (qualified or not absolute):
        return labels[:2]
    if len(labels) == 2 and not qualified and not absolute:
        return labels
    return None


def service_reference(endpoint: str) -> ServiceRef | None:
    """The Service named by ``<svc>.<ns>``, ``<svc>.<ns>.svc`` or
    ``<svc>.<ns>.svc.cluster.local`` (trailing dot allowed on the last), with a port,
    any scheme, any case; None for any other form (bare names, IPs, external names,
    another cluster domain)."""
    split = _split_host_port(strip_scheme(endpoint))
    if isinstance(split, str):
        return None
    host, port = split
    labels = _searched_service_labels(host)
    if labels is None or not (port.isascii() and port.isdigit()):
        return None
    return ServiceRef(labels[0], labels[1], int(port))


def service_namespace(endpoint: str, own_namespace: str) -> str | None:
    """The namespace of the Kubernetes Service (or Service-backed pod) an endpoint's host
    names, when the host is in-cluster Service DNS.

    Decision (the spec: "Bare hostnames, IPs, and unqualified names pass through because
    no namespace can be inferred"): every form an engine pod's resolver takes to a
    Service of a named namespace names that namespace:

    * ``<svc>.<ns>``, ``<svc>.<ns>.svc`` and ``<svc>.<ns>.svc.cluster.local`` -> ``ns``
      (``service_reference``: ``<svc>.<ns>`` resolves through the ``svc.<domain>``
      search domain before any outside name would);
    * ``<pod>.<svc>.<ns>.svc`` and ``<pod>.<svc>.<ns>.svc.cluster.local`` (per-pod names
      of a headless Service, e.g. StatefulSet pods) -> ``ns``;
    * an absolute name (trailing ``.``) and any letter case are the same name, except
      that an absolute name outside ``cluster.local`` is not searched.

    Everything else -> None: bare names (they resolve in the backend's own namespace),
    IPs, names of three labels or more that do not end in ``.svc[.cluster.local]``
    (``redis.example.com``; ``cache.team-b.svc.example.com``). A cluster with a custom
    DNS domain uses the ``.svc`` form, which every cluster resolves.

    ``own_namespace`` is not needed to infer the namespace; callers compare the result
    with it (a result equal to it is not a crossing).
    """
    del own_namespace  # the comparison belongs to the caller
    ref = service_reference(endpoint)
    if ref is not None:
        return ref.namespace
    host = _host_of(endpoint)
    if host is None or host.startswith("["):
        return None
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]
    suffix = "." + CLUSTER_DOMAIN
    if name.endswith(suffix):
        name = name[: -len(suffix)]
    labels = name.split(".")
    # <pod>.<svc>.<ns>.svc: the namespace is the label just before the final "svc".
    if len(labels) < 3 or labels[-1] != "svc" or any(not label for label in labels):
        return None
    return labels[-2]
