"""Engine and LMCache-server versions as the control plane can know them: pure rules the
worker (advisory conditions) and ``icache doctor`` (its version listing) share.

- An engine pod's versions come from its ``lmcache-kernel-check`` verdict, the JSON
  termination message of that init container: ``versions`` holds the lmcache, vllm and
  torch releases installed in the engine image (package metadata), each absent when not
  installed; a verdict from before the field reports none.
- The managed LMCache server's version is its image tag (``lmcache/standalone:v0.4.7``);
  a digest, no tag or a tag that is no release is unknown, never guessed.
- A client and its server are skewed when their major.minor differ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared import constants as c
from shared import engine_versions as ev
from shared.api.models import CacheBackend
from shared.engine_versions import LMCACHE, VLLM
from shared.runtime_adapters import kernel_check
from shared.storage_providers.render import managed_provider

TORCH: Final = "torch"
# The packages whose installed version the kernel check reports.
VERSIONED_PACKAGES: Final = (LMCACHE, VLLM, TORCH)
MAX_VERSION_CHARS: Final = 64
# A tag that names a release: v0.4.7, 0.4.7, v0.5.6-cu128 ... (at least major.minor).
_RELEASE_TAG: Final = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-.+_][0-9A-Za-z.+_-]*)?$")


# ------------------------------------------------------------------ the verdict


def parse_kernel_check_verdict(message: str | None) -> dict[str, Any] | None:
    """The JSON verdict of the termination message; with FallbackToLogsOnError the
    message may be log lines, so the last line that is a JSON object counts."""
    text = (message or "").strip()
    if not text:
        return None
    for candidate in (text, *reversed(text.splitlines())):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def reported_versions(verdict: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The installed versions a verdict reports: its ``versions`` object's string values
    for the packages the check reads, sorted by package. A verdict without the field (a
    check from before it existed), or with a malformed one, reports none; never guessed."""
    raw = (verdict or {}).get("versions")
    if not isinstance(raw, Mapping):
        return ()
    out = []
    for package in VERSIONED_PACKAGES:
        value = raw.get(package)
        if isinstance(value, str) and value.strip():
            out.append((package, value.strip()[:MAX_VERSION_CHARS]))
    return tuple(sorted(out))


def _named(items: Iterable[Mapping[str, Any]] | None, name: str) -> Mapping[str, Any] | None:
    for item in items or ():
        if isinstance(item, Mapping) and item.get("name") == name:
            return item
    return None


def kernel_check_termination(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The kernel check's ``terminated`` state: the current one, else the last one (a
    strict check that failed waits in CrashLoopBackOff with it on ``lastState``); None
    while it has not finished or when the pod does not run the check."""
    spec = pod.get("spec") or {}
    if _named(spec.get("initContainers"), kernel_check.CONTAINER_NAME) is None:
        return None
    st = _named((pod.get("status") or {}).get("initContainerStatuses"), kernel_check.CONTAINER_NAME)
    if st is None:
        return None
    terminated = (st.get("state") or {}).get("terminated") or (st.get("lastState") or {}).get(
        "terminated"
    )
    return terminated if isinstance(terminated, Mapping) and terminated else None


# ------------------------------------------------------------------ the server


@dataclass(frozen=True)
class ServerVersion:
    """The managed server's version as read from its image: ``version`` None when the
    image does not name one (``why`` says what it names instead)."""

    image: str
    version: str | None
    why: str = ""


def image_tag(image: str) -> str | None:
    """The tag of an image reference, None when it has none (or is pinned by digest):
    the last ``:`` after the last ``/`` separates it (a registry port is before a ``/``)."""
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.rsplit(":", 1)[1] or None


def server_version_of_image(image: str) -> ServerVersion:
    """Rule: the LMCache server's version is its image tag (``lmcache/standalone:v0.4.7``
    is 0.4.7). A digest (even beside a tag: the digest decides what runs), a missing tag
    or a tag that is not a release (``latest``, ``nightly``) is an unknown version."""
    image = image.strip()
    if "@" in image:
        return ServerVersion(image, None, "it is pinned by digest, which names no release")
    tag = image_tag(image)
    if tag is None:
        return ServerVersion(image, None, "it has no tag")
    if _RELEASE_TAG.match(tag) is None:
        return ServerVersion(image, None, f"its tag {tag!r} is not a release number")
    return ServerVersion(image, tag.lstrip("vV"))


# ------------------------------------------------------------------ comparing


def major_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a release; None when it does not start with major.minor."""
    parts = ev.version_tuple(version)
    if parts is None or len(parts) < 2:
        return None
    return parts[0], parts[1]


def client_skewed(client: str, server: str) -> bool | None:
    """Rule: a client differs from its server when their major.minor differ; None when
    either does not parse (unknown, not a skew)."""
    a, b = major_minor(client), major_minor(server)
    if a is None or b is None:
        return None
    return a != b


# ------------------------------------------------------------------ the managed server


def lmcache_server_image(cb: CacheBackend) -> str | None:
    """The image of the LMCache server this backend provisions: a managed LMCacheServer
    provider only (External runs the operator's server, whose version the control plane
    cannot see)."""
    provider = managed_provider(cb)
    if provider is None or provider.provider != c.PROVIDER_LMCACHE_SERVER:
        return None
    return provider.image(cb.spec)
