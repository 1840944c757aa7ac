"""The PodMonitor ``inference-cache-engines`` of the Helm chart (monitoring on) scrapes
the pods the Pod webhook wired, at the ports it recorded, labelled by backend
(docs/decisions.md "The engines' own cache numbers"; docs/metrics.md "Engine series").

The chart is rendered with ``helm template`` and its relabelling applied to pods the
real wiring (``wire_pod``) produced, the way Prometheus's pod discovery presents them:
one target per container port (or per container without ports), with the pod's
labels and annotations as ``__meta_kubernetes_pod_*`` labels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from shared import constants as c
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from tests.builders import CTX
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod
from tests.helm_chart import VALUE_SETS, template

POD_IP = "10.1.2.3"


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _targets(pod: dict[str, Any], pod_ip: str) -> list[dict[str, str]]:
    """Prometheus's pod-role targets of ``pod`` before relabelling."""
    meta = pod["metadata"]
    base = {
        "__address__": pod_ip,
        "__meta_kubernetes_pod_ip": pod_ip,
        "__meta_kubernetes_namespace": meta.get("namespace", "default"),
        **{
            f"__meta_kubernetes_pod_annotation_{_sanitize(k)}": v
            for k, v in (meta.get("annotations") or {}).items()
        },
        **{
            f"__meta_kubernetes_pod_label_{_sanitize(k)}": v
            for k, v in (meta.get("labels") or {}).items()
        },
    }
    out = []
    for ct in [*pod["spec"]["containers"], *(pod["spec"].get("initContainers") or [])]:
        ports = ct.get("ports") or [{}]
        for port in ports:
            address = f"{pod_ip}:{port['containerPort']}" if port else pod_ip
            out.append({**base, "__address__": address, "container": ct["name"]})
    return out


def _relabel(target: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """The subset of Prometheus relabelling the PodMonitor uses (keep, replace, labeldrop)."""
    labels = dict(target)
    for rule in rules:
        action = rule.get("action", "replace").lower()
        regex = rule.get("regex", "(.*)")
        if action == "labeldrop":
            labels = {k: v for k, v in labels.items() if not re.fullmatch(regex, k)}
            continue
        value = rule.get("separator", ";").join(labels.get(s, "") for s in rule["sourceLabels"])
        match = re.fullmatch(regex, value)
        if action == "keep":
            if not match:
                return None
        elif action == "replace" and match:
            replacement = re.sub(r"\$(\d+)", r"\\\1", rule.get("replacement", "$1"))
            labels[rule["targetLabel"]] = match.expand(replacement)
    return labels


def _scraped(
    monitor: dict[str, Any], pod: dict[str, Any], pod_ip: str = POD_IP
) -> set[tuple[str, str, str]]:
    """(address, namespace, cachebackend) of the distinct targets the monitor keeps."""
    selector = monitor["spec"]["selector"]["matchLabels"]
    if not selector.items() <= (pod["metadata"].get("labels") or {}).items():
        return set()
    found = set()
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        for target in _targets(pod, pod_ip):
            kept = _relabel(target, endpoint["relabelings"])
            if kept is not None:
                assert "container" not in kept, "per-container targets would not fold"
                ns = kept["__meta_kubernetes_namespace"]
                found.add((kept["__address__"], ns, kept.get("cachebackend", "")))
    return found


def _podmonitor(helm_bin: Path, tmp_path: Path) -> dict[str, Any]:
    docs = template(helm_bin, VALUE_SETS["monitoring"], tmp_path)
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["metadata"]["name"] == "inference-cache-engines"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    return monitor


def test_the_podmonitor_scrapes_a_wired_vllm_pod_at_its_port(
    helm_bin: Path, tmp_path: Path
) -> None:
    monitor = _podmonitor(helm_bin, tmp_path)
    engine = make_container(args=["--port", "8080"], ports=[{"containerPort": 8080}])
    wired = wire_pod(make_pod(engine), [make_backend("my-cache")], CTX)
    assert wired.outcome == OUTCOME_INJECTED
    # The engine's port and the kvevent-subscriber's portless container fold into one.
    assert _scraped(monitor, wired.pod) == {(f"{POD_IP}:8080", "team-a", "my-cache")}
    # An IPv6 pod IP is bracketed.
    assert _scraped(monitor, wired.pod, "fd00::1") == {("[fd00::1]:8080", "team-a", "my-cache")}


def test_the_podmonitor_scrapes_the_lmcache_mp_worker_beside_sglang(
    helm_bin: Path, tmp_path: Path
) -> None:
    monitor = _podmonitor(helm_bin, tmp_path)
    engine = make_container("sglang", "lmsysorg/sglang:v0.5.13", args=["--enable-metrics"])
    backends = [make_backend("sg", runtime=c.RUNTIME_SGLANG)]
    wired = wire_pod(make_pod(engine), backends, CTX)
    assert wired.outcome == OUTCOME_INJECTED, wired.message
    assert _scraped(monitor, wired.pod) == {
        (f"{POD_IP}:9090", "team-a", "sg"),
        (f"{POD_IP}:30000", "team-a", "sg"),
    }


def test_the_podmonitor_leaves_unwired_pods_alone(helm_bin: Path, tmp_path: Path) -> None:
    """A pod no backend selects (its stale label cleared by the webhook) and a pod never
    seen by it are not scraped; the label alone without a port is not either."""
    monitor = _podmonitor(helm_bin, tmp_path)
    stale = make_pod(
        labels={"app": "other", c.LABEL_METRICS: "engine"},
        annotations={c.ANNOTATION_METRICS_PORT: "8000"},
    )
    unwired = wire_pod(stale, [make_backend()], CTX)
    assert _scraped(monitor, unwired.pod) == set()
    assert _scraped(monitor, make_pod()) == set()
    labelled_only = make_pod(labels={"app": "x", c.LABEL_METRICS: "engine"})
    assert _scraped(monitor, labelled_only) == set()
