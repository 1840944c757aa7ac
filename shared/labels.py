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


def _requirement_matches(requirement: str, labels: Mapping[str, str]) -> bool:
    """One requirement of a label-selector string: ``k``, ``!k``, ``k=v``, ``k==v``,
    ``k!=v``, ``k in (a,b)`` or ``k notin (a,b)`` (the API server's grammar)."""
    text = requirement.strip()
    for op in (" notin ", " in "):
        if op in text:
            key, _, rest = text.partition(op)
            values = {
                v.strip() for v in rest.strip().removeprefix("(").removesuffix(")").split(",")
            }
            key = key.strip()
            present = key in labels and labels[key] in values
            return present if op == " in " else not present
    if text.startswith("!"):
        return text[1:].strip() not in labels
    if "!=" in text:
        key, _, value = text.partition("!=")
        return labels.get(key.strip()) != value.strip()
    if "=" in text:
        key, _, value = text.replace("==", "=").partition("=")
        return labels.get(key.strip()) == value.strip()
    return text in labels


def _split_requirements(selector: str) -> list[str]:
    """The requirements of a selector string: commas outside ``( )`` separate them."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p for p in parts if p.strip()]


def selector_string_matches(selector: str | None, labels: Mapping[str, str] | None) -> bool:
    """Whether ``labels`` satisfy a label-selector string as a list or watch sends it
    (None or empty: everything matches), every requirement ANDed."""
    present = dict(labels or {})
    return all(_requirement_matches(r, present) for r in _split_requirements(selector or ""))
