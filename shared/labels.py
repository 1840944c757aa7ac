"""Kubernetes label syntax and equality-based label selectors, as the API server has them.

- ``is_qualified_name``: a label key (k8s IsQualifiedName): an optional DNS-subdomain
  prefix and ``/``, then a name of at most 63 characters — alphanumerics, ``-``, ``_``
  or ``.``, starting and ending with an alphanumeric.
- ``valid_label_value``: empty, or at most 63 characters of the same alphabet.
- ``valid_selector``: every key and value of a matchLabels map is valid; a selector that
  is not can match no object (the API server validates every object's labels), and the
  API server refuses it in a labelSelector query.
- ``equality_selector``: ``k1=v1,k2=v2`` (sorted) for a labelSelector query.
- ``labels_match``: the map is non-empty and contained in an object's labels. The one
  engineSelector match: the Pod webhook and doctor (``shared.pod_wiring``), the
  dispatcher's and the workers' enqueue rules (``reconciler.watch.enqueue_keys``) and the
  workers' reads all call it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

_QUALIFIED_NAME_RE: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN_RE: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
MAX_LABEL_VALUE_LENGTH: Final = 63


def is_qualified_name(name: str) -> bool:
    """k8s IsQualifiedName."""
    parts = name.split("/")
    if len(parts) == 1:
        prefix, local = "", parts[0]
    elif len(parts) == 2:
        prefix, local = parts
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
            return False
    else:
        return False
    return (
        0 < len(local) <= MAX_LABEL_VALUE_LENGTH and _QUALIFIED_NAME_RE.fullmatch(local) is not None
    )


def valid_label_value(value: str) -> bool:
    """k8s IsValidLabelValue."""
    return value == "" or (
        len(value) <= MAX_LABEL_VALUE_LENGTH and _QUALIFIED_NAME_RE.fullmatch(value) is not None
    )


def valid_selector(labels: Mapping[str, str]) -> bool:
    return all(is_qualified_name(k) and valid_label_value(v) for k, v in labels.items())


def equality_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str] | None) -> bool:
    return bool(selector) and selector.items() <= dict(labels or {}).items()
