"""A small, pure evaluator of Kubernetes NetworkPolicy ingress, as a network plugin that
enforces the networking.k8s.io/v1 API decides it.

The controller renders a NetworkPolicy per managed cache tier; nothing in a test
cluster (or on a plugin without enforcement) carries it out, so whether it admits the
engines and refuses everyone else is judged here, from the object itself. Only what
pod-to-pod traffic needs is modelled: label selectors (matchLabels and
matchExpressions), podSelector / namespaceSelector peers and TCP/UDP/SCTP ports by
number or by the target container's port name. ipBlock peers match no pod (they are
about addresses outside the pod network, and the cluster's pod CIDRs are excepted from
them by convention; an evaluator cannot know pod IPs anyway).

Semantics (https://kubernetes.io/docs/concepts/services-networking/network-policies/):

* a policy applies to the pods its ``podSelector`` selects in its own namespace, for
  ingress when ``policyTypes`` holds ``Ingress`` (or, absent, always);
* a pod no ingress policy applies to accepts everything;
* otherwise a connection is allowed when any applying policy has an ingress rule whose
  ``from`` matches the source (absent or empty: every source) and whose ``ports``
  match the port (absent or empty: every port); the policies are a union;
* a peer with only ``podSelector`` means pods of the policy's namespace; with only
  ``namespaceSelector``, every pod of the selected namespaces; with both, the selected
  pods of the selected namespaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PodRef:
    """A pod as a policy sees it: where it runs, its labels, and its named ports."""

    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    # containerPort name -> (number, protocol): what a named policy port resolves to.
    named_ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against a label set. An empty selector selects everything;
    a None selector (the field absent) is the caller's to interpret."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = list(expr.get("values") or [])
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # an invalid selector selects nothing
    return True


def _namespace(policy: Mapping[str, Any]) -> str:
    return str((policy.get("metadata") or {}).get("namespace") or "")


def applies_to_ingress(policy: Mapping[str, Any], target: PodRef) -> bool:
    """Whether ``policy`` isolates ``target`` for ingress."""
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes")
    if types is not None and "Ingress" not in types:
        return False
    if _namespace(policy) != target.namespace:
        return False
    return label_selector_matches(spec.get("podSelector") or {}, target.labels)


def peer_matches(peer: Mapping[str, Any], policy_namespace: str, source: PodRef) -> bool:
    pods = peer.get("podSelector")
    namespaces = peer.get("namespaceSelector")
    if pods is None and namespaces is None:
        return False  # an ipBlock peer (or an empty, invalid one): no pod
    if namespaces is None:
        in_scope = source.namespace == policy_namespace
    else:
        in_scope = label_selector_matches(namespaces, source.namespace_labels)
    return in_scope and (pods is None or label_selector_matches(pods, source.labels))


def port_matches(rule_port: Mapping[str, Any], target: PodRef, port: int, protocol: str) -> bool:
    if (rule_port.get("protocol") or "TCP") != protocol:
        return False
    want = rule_port.get("port")
    if want is None:
        return True  # every port of the protocol
    if isinstance(want, str) and not want.isdigit():
        named = target.named_ports.get(want)
        return named is not None and named == (port, protocol)
    low = int(want)
    high = rule_port.get("endPort")
    return low <= port <= (int(high) if high is not None else low)


def rule_admits(
    rule: Mapping[str, Any],
    policy_namespace: str,
    target: PodRef,
    source: PodRef,
    port: int,
    protocol: str,
) -> bool:
    peers = rule.get("from") or []
    if peers and not any(peer_matches(p, policy_namespace, source) for p in peers):
        return False
    ports = rule.get("ports") or []
    return not ports or any(port_matches(p, target, port, protocol) for p in ports)


def ingress_allowed(
    policies: Iterable[Mapping[str, Any]],
    target: PodRef,
    source: PodRef,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether ``source`` may open a connection to ``target`` on ``port``."""
    applying = [p for p in policies if applies_to_ingress(p, target)]
    if not applying:
        return True
    return any(
        rule_admits(rule, _namespace(policy), target, source, port, protocol)
        for policy in applying
        for rule in (policy.get("spec") or {}).get("ingress") or []
    )
