"""Exact drift of the objects whose every key is a security boundary.

The subset comparison of :mod:`reconciler.steps.diff` ignores keys someone added inside the
objects we set, and server-side apply leaves them in place (another field manager owns
them). For a NetworkPolicy that is a hole: a ``matchExpressions`` added to our
``podSelector`` makes the policy select no pod, so the tier is open to everyone; a
peer added to ``from`` admits it. For these kinds the whole ``spec`` must be what we
render, compared after the API server's own defaulting, and a differing one is
replaced outright (:func:`spec_replacement`).
"""

from __future__ import annotations

from typing import Any, Final

# Kinds whose spec is restored exactly, keys added by others included.
EXACT_SPEC_KINDS: Final = frozenset({"NetworkPolicy"})
# The API server's default for a NetworkPolicy port's protocol.
DEFAULT_PROTOCOL: Final = "TCP"


def normalized_policy_spec(value: Any, parent: str = "") -> Any:
    """A NetworkPolicy spec with what the API server adds or drops made explicit:
    ``protocol: TCP`` on every port, no null values and no empty lists (an absent and
    an empty ``from``/``ports``/``ingress`` mean the same), no empty ``matchLabels``
    (omitted when empty). An empty selector object (``namespaceSelector: {}``, every
    namespace) is kept: it differs from an absent one."""
    if isinstance(value, dict):
        out = {
            key: normalized_policy_spec(item, key)
            for key, item in value.items()
            if item is not None
            and item != []
            and not (key in ("matchLabels", "matchExpressions") and not item)
        }
        if parent == "ports" and "protocol" not in out:
            out["protocol"] = DEFAULT_PROTOCOL
        return out
    if isinstance(value, list):
        return [normalized_policy_spec(item, parent) for item in value]
    return value


def spec_exactly_equal(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """True when the live object's spec is exactly the desired one (defaults aside);
    always True for kinds outside EXACT_SPEC_KINDS (the subset diff decides there)."""
    if desired.get("kind") not in EXACT_SPEC_KINDS:
        return True
    if live is None:
        return False
    return bool(
        normalized_policy_spec(desired.get("spec") or {})
        == normalized_policy_spec(live.get("spec") or {})
    )


def spec_replacement(desired: dict[str, Any], live_uid: str) -> list[dict[str, Any]]:
    """The JSON patch that replaces the live spec with ours, on exactly the object we
    read (a ``test`` of its uid: a successor under the name is refused, not taken)."""
    return [
        {"op": "test", "path": "/metadata/uid", "value": live_uid},
        {"op": "replace", "path": "/spec", "value": desired["spec"]},
    ]
