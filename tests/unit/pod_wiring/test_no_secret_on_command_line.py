"""Decision "No secret on a command line": no container we render (managed tiers, the
shipped install) or inject (engine sidecars and flags) carries a credential in its
``command`` or ``args`` — neither a literal nor a ``$(VAR)`` reference to a variable
read from a Secret, which the kubelet would expand into the process's argv (visible to
anyone who can list processes on the node, and to any log of the command line)."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
import yaml

from shared import constants as c
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from shared.runtime_adapters.base import InjectContext
from shared.storage_providers.render import render_managed_objects
from tests import builders
from tests.builders import isolated_backend
from tests.samples import ROOT

PASSWORD = "7" * 64
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
SGLANG = {
    "name": "sglang",
    "image": "lmsysorg/sglang:v0.5.3",
    "command": ["python3", "-m", "sglang.launch_server"],
    "args": ["--model-path", "Qwen/Qwen3-8B"],
}


def all_containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]


def secret_vars(container: dict[str, Any]) -> set[str]:
    """The container's env vars read from a Secret (secretKeyRef, or envFrom a Secret:
    then every name is suspect, so a marker)."""
    names = {
        e["name"]
        for e in container.get("env") or []
        if "secretKeyRef" in (e.get("valueFrom") or {})
    }
    if any("secretRef" in source for source in container.get("envFrom") or []):
        names.add("*")
    return names


def credential_words(container: dict[str, Any], literals: tuple[str, ...] = ()) -> list[str]:
    """The command/args words that carry a credential."""
    secret = secret_vars(container)
    out = []
    for word in [*(container.get("command") or []), *(container.get("args") or [])]:
        refs = set(VAR.findall(str(word)))
        if refs & secret or ("*" in secret and refs) or any(x in str(word) for x in literals):
            out.append(str(word))
    return out


def test_the_checker_catches_the_pattern() -> None:
    """The test can fail: the shape this decision removed is caught."""
    bad = {
        "name": "redis",
        "args": ["redis-server", "--requirepass", "$(PW)"],
        "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    }
    assert credential_words(bad) == ["$(PW)"]
    json_arg = {**bad, "args": ['{"type":"resp","password":"$(PW)"}']}
    assert credential_words(json_arg)
    assert credential_words({"name": "x", "args": [f"--password={PASSWORD}"]}, (PASSWORD,))


@pytest.mark.parametrize(
    "provider", [c.PROVIDER_REDIS, c.PROVIDER_LMCACHE_SERVER, c.PROVIDER_MOONCAKE]
)
def test_no_managed_tier_container_carries_a_credential(provider: str) -> None:
    cb = isolated_backend(provider)
    objs = render_managed_objects(cb, generate_password=lambda: PASSWORD)
    literals = (PASSWORD, base64.b64encode(PASSWORD.encode()).decode())
    for obj in objs:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in all_containers(obj["spec"]["template"]["spec"]):
            assert credential_words(container, literals) == [], container["name"]
        assert PASSWORD not in json.dumps(obj)


@pytest.mark.parametrize(
    "remote",
    [
        pytest.param(builders.managed(c.PROVIDER_REDIS), id="managed-redis"),
        pytest.param(
            builders.external(c.PROVIDER_REDIS, "cache-redis.team-a.svc:6379"),
            id="cross-namespace-redis-consumer",
        ),
        pytest.param(builders.external(c.PROVIDER_REDIS, "redis.example:6379"), id="external"),
        pytest.param(None, id="host-only"),
    ],
)
def test_no_injected_sglang_container_carries_a_credential(remote: dict[str, Any] | None) -> None:
    cb = builders.backend(
        runtime=c.RUNTIME_SGLANG,
        type_=c.TYPE_LMCACHE,
        remote=remote,
        namespace="team-b" if remote and remote.get("ownership") == "External" else "team-a",
        status_endpoint="cache-redis.team-a.svc:6379"
        if remote and "endpoint" not in remote
        else None,
        allowCrossNamespace=True if remote and remote.get("ownership") == "External" else None,
    )
    ns = cb["metadata"]["namespace"]
    result = wire_pod(builders.pod(SGLANG, namespace=ns), [cb], InjectContext())
    assert result.outcome == OUTCOME_INJECTED, result.message
    for container in all_containers(result.pod["spec"]):
        assert credential_words(container) == [], container["name"]


@pytest.mark.parametrize("runtime", [c.RUNTIME_VLLM])
@pytest.mark.parametrize(
    "remote",
    [
        pytest.param(builders.managed(c.PROVIDER_LMCACHE_SERVER), id="managed-lmcache-server"),
        pytest.param(None, id="host-only"),
    ],
)
def test_no_injected_vllm_container_carries_a_credential(
    runtime: str, remote: dict[str, Any] | None
) -> None:
    cb = builders.backend(
        runtime=runtime,
        remote=remote,
        status_endpoint="cache-lmcache-server.team-a.svc:65432" if remote else None,
    )
    result = wire_pod(builders.pod(), [cb], InjectContext())
    assert result.outcome == OUTCOME_INJECTED, result.message
    for container in all_containers(result.pod["spec"]):
        assert credential_words(container) == [], container["name"]


def shipped_pod_specs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "manifests" / "rendered").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            spec = doc.get("spec") or {}
            if doc.get("kind") == "CronJob":
                spec = (spec.get("jobTemplate") or {}).get("spec") or {}
            template = spec.get("template") or {}
            if isinstance(template, dict) and "spec" in template:
                out.append(
                    (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", template["spec"])
                )
    return out


def test_no_shipped_container_carries_a_credential() -> None:
    specs = shipped_pod_specs()
    assert specs, "the rendered install has pod templates"
    for where, spec in specs:
        for container in all_containers(spec):
            assert credential_words(container) == [], f"{where}: {container['name']}"
