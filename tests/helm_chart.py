"""The Helm chart rendered with ``helm template``, and the value sets it is rendered
with: shared by the chart's unit tests and its install on the control plane."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "inference-cache"
NAMESPACE = "inference-cache-system"
KUBE_VERSION = "1.35.0"

Doc = dict[str, Any]

# Value sets `helm lint` and `helm template` run with (besides the defaults).
VALUE_SETS: dict[str, dict[str, Any]] = {
    "cert-manager": {"certificates": {"mode": "cert-manager"}},
    "monitoring": {"monitoring": {"enabled": True}},
    "external-redis": {
        "redis": {"enabled": False},
        "externalRedis": {
            "url": "rediss://redis.example.internal:6380/2",
            "passwordSecret": {"name": "my-redis", "key": "secret"},
        },
    },
    "production": {
        "namespace": {"name": "cache-ops", "create": True},
        "images": {
            "webhook": {"repository": "registry.example/ic/webhook", "tag": "1.2.3"},
            "worker": {"repository": "registry.example/ic/worker", "tag": "1.2.3"},
        },
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"node-role": "control"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops"}],
        "webhook": {
            "workers": 4,
            "autoscaling": {"enabled": False},
            "replicas": 3,
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
            "affinity": {"podAntiAffinity": {}},
        },
        "dispatcher": {"replicas": 3, "pdb": {"enabled": False}},
        "worker": {"replicas": 5, "concurrency": 8, "pdb": {"enabled": True}},
        "kveventSubscriber": {"image": "registry.example/ic/kvevent-subscriber:1.2.3"},
        "cacheIndexServer": {"url": "http://index.ops:8081", "address": "index.ops:50051"},
        "monitoring": {
            "enabled": True,
            "labels": {"release": "prometheus"},
            "dashboard": {"namespace": "monitoring"},
        },
        "crds": {"keep": False},
    },
}


def helm(helm_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_bin), *args], capture_output=True, text=True, timeout=120, check=False
    )


def template(helm_bin: Path, values: dict[str, Any] | None, tmp_path: Path) -> list[Doc]:
    args = ["template", "inference-cache", str(CHART), "--namespace", NAMESPACE]
    args += ["--kube-version", KUBE_VERSION]
    if values:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["--values", str(path)]
    done = helm(helm_bin, *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]
