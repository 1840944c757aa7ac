"""Which vLLM release an engine container runs, read from its image tag.

A tag is a vLLM release tag when it is ``v<major>.<minor>.<patch>`` (the
``vllm/vllm-openai`` tags; a ``-cu126``-style suffix or a ``+local`` part is allowed)
or the bare ``<major>.<minor>.<patch>`` a mirror may use. ``latest``, ``nightly``, a
commit hash, a digest-only reference or no tag names no release: ``image_release``
returns None and callers apply the newest semantics and say so.
"""

from __future__ import annotations

import re
from typing import Any, Final

# v0.34.0, 0.11.0, v0.11.1rc2, v0.33.0-cu126: the numeric triple decides.
_RELEASE_TAG: Final = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:(?:rc|\.post|-|\+)[0-9A-Za-z.\-+]*)?$")


def _image_tag(image: str) -> str | None:
    """The tag of an image reference (``repo:tag`` or ``repo:tag@digest``); None without one."""
    name = image.strip().split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.split(":", 1)[1] or None


def release_from_tag(tag: str | None) -> tuple[int, int, int] | None:
    """``v0.34.0`` -> (0, 34, 0); None when the tag names no release."""
    match = _RELEASE_TAG.match(tag or "")
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def image_release(container: dict[str, Any]) -> tuple[int, int, int] | None:
    """The vLLM release the container's image tag names, or None."""
    return release_from_tag(_image_tag(str(container.get("image") or "")))


def release_text(release: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in release)


# The KV connectors vLLM's factory registers (``KVConnectorFactory.register_connector``
# in ``vllm/distributed/kv_transfer/kv_connector/factory.py``), per release read. A
# contract test keeps every row equal to that release's wheel.
_REGISTERED_0_33_0: Final = frozenset(
    {
        "ExampleConnector",
        "ExampleHiddenStatesConnector",
        "LMCacheConnectorV1",
        "LMCacheMPConnector",
        "NixlConnector",
        "NixlPullConnector",
        "NixlPushConnector",
        "MultiConnector",
        "HiSparseConnector",
        "MoRIIOConnector",
        "OffloadingConnector",
        "DecodeBenchConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "FlexKVConnectorV1",
        "SimpleCPUOffloadConnector",
        "HF3FSKVConnector",
    }
)

REGISTERED_KV_CONNECTORS: Final[dict[tuple[int, int, int], frozenset[str]]] = {
    (0, 11, 0): frozenset(
        {
            "SharedStorageConnector",
            "P2pNcclConnector",
            "LMCacheConnectorV1",
            "NixlConnector",
            "MultiConnector",
            "OffloadingConnector",
        }
    ),
    (0, 33, 0): _REGISTERED_0_33_0,
    # 0.34.0 adds the UMBP store connector.
    (0, 34, 0): _REGISTERED_0_33_0 | {"UMBPStoreConnector"},
}


def connector_registered(name: str, release: tuple[int, int, int] | None) -> bool | None:
    """Whether vLLM ``release`` registers the KV connector ``name``; None when the
    releases read do not settle it.

    A release read answers for itself. Between two releases read, a connector both
    register (or neither) is taken as registered (or not); one only the older or only
    the newer registers is unknown. After the newest read (or an image tag naming no
    release, which gets the newest semantics) a connector the newest registers is
    registered, another unknown (it may have been added since); before the oldest,
    unknown.
    """
    read = sorted(REGISTERED_KV_CONNECTORS)
    if release in REGISTERED_KV_CONNECTORS:
        return name in REGISTERED_KV_CONNECTORS[release]
    if release is None or release > read[-1]:
        return True if name in REGISTERED_KV_CONNECTORS[read[-1]] else None
    if release < read[0]:
        return None
    older = max(r for r in read if r < release)
    newer = min(r for r in read if r > release)
    in_older = name in REGISTERED_KV_CONNECTORS[older]
    return in_older if in_older == (name in REGISTERED_KV_CONNECTORS[newer]) else None
