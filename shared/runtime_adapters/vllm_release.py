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


def image_tag(image: str) -> str | None:
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
    return release_from_tag(image_tag(str(container.get("image") or "")))


def release_text(release: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in release)
