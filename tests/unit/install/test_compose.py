"""docker-compose.yaml, without a Docker engine: its shape, and the webhook command
it runs, executed here as the container would run it (samples mounted at /samples
become manifests/samples), with the curl replay docs/install.md documents."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_install.manifests_cli import split_image
from tests.harness.controlplane import (
    free_port,
    spawn_in_own_group,
    terminate_process_group,
    wait_until,
)
from tests.samples import ROOT

COMPOSE = ROOT / "docker-compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _flag(command: list[str], name: str) -> str:
    for i, arg in enumerate(command):
        if arg == name:
            return command[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} not in {command}")


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"redis", "webhook"}
    for service in compose["services"].values():
        _, tag, digest = split_image(service["image"])
        assert digest or (tag and tag != "latest"), service["image"]


def test_webhook_runs_embedded_over_plain_http_with_the_samples(compose: dict[str, Any]) -> None:
    webhook = compose["services"]["webhook"]
    command = webhook["command"]
    assert command[0] == "webhook"
    assert "--insecure" in command
    # Plain HTTP binds 127.0.0.1 unless told; Docker's port mapping
    # reaches the container's interface, not its loopback.
    assert _flag(command, "--host") == "0.0.0.0"
    samples_in_container = _flag(command, "--backends-from")
    (mount,) = [v for v in webhook["volumes"] if v["target"] == samples_in_container]
    assert (ROOT / mount["source"]).resolve() == ROOT / "manifests" / "samples"
    assert mount["read_only"] is True
    port = _flag(command, "--port")
    assert webhook["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert webhook["environment"]["ICACHE_HEALTH_PORT"] == port
    assert webhook["build"]["dockerfile"] == "Dockerfile.webhook"
    assert webhook["read_only"] is True
    assert webhook["cap_drop"] == ["ALL"]


def test_redis_is_local_only_and_checked(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert redis["ports"] == ["127.0.0.1:6379:6379"]
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    # The work queue is rebuilt by the dispatcher's resync: nothing to persist.
    command = redis["command"]
    assert command[:2] == ["sh", "-c"]
    assert command[2].endswith('| exec redis-server - --save "" --appendonly no')
    # Redis authentication by default: a password, from the variable the local icache
    # processes read too; the healthcheck's redis-cli authenticates with it. It reaches
    # redis-server as stdin config from the environment ($$ escapes compose's own
    # interpolation), never on a command line.
    password = "${ICACHE_REDIS_PASSWORD:-icache-dev}"
    assert command[2].startswith("""printf 'requirepass "%s"\\n' "$$REDISCLI_AUTH" |""")
    assert "--requirepass" not in command[2]
    assert redis["environment"] == {"REDISCLI_AUTH": password}
    assert "--protected-mode" not in command[2]


@pytest.fixture(scope="module")
def compose_webhook(
    compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The compose webhook command, run here: /samples is manifests/samples, a free port."""
    command = list(compose["services"]["webhook"]["command"])
    port = free_port()
    rewritten = []
    for arg in command:
        if arg.startswith("--backends-from="):
            arg = f"--backends-from={ROOT / 'manifests' / 'samples'}"
        elif arg.startswith("--port="):
            arg = f"--port={port}"
        rewritten.append(arg)
    log = tmp_path_factory.mktemp("compose") / "webhook.log"
    proc = spawn_in_own_group(
        [sys.executable, "-m", "icache_cli.main", *rewritten, "--host=127.0.0.1"], log, ROOT
    )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)

    try:
        wait_until(
            healthy,
            timeout=30,
            description="compose webhook /healthz",
            abort=lambda: None if proc.poll() is None else Path(log).read_text()[-2000:],
        )
        yield base
    finally:
        terminate_process_group(proc)


def _replay(base: str, path: str, example: str) -> dict[str, Any]:
    """What `curl -X POST --data @examples/admission/<example> <base><path>` does."""
    body = (ROOT / "examples" / "admission" / example).read_bytes()
    request = urllib.request.Request(
        base + path, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


@pytest.mark.services
def test_curl_replay_against_the_compose_webhook(compose_webhook: str) -> None:
    denied = _replay(
        compose_webhook,
        "/validate-inferencecache-io-v1alpha1-cachebackend",
        "create-invalid-aggregated.json",
    )
    assert denied["kind"] == "AdmissionReview"
    assert denied["response"]["allowed"] is False
    allowed = _replay(
        compose_webhook,
        "/validate-inferencecache-io-v1alpha1-cachebackend",
        "create-vllm-host-only.json",
    )
    assert allowed["response"]["allowed"] is True
