"""Redis authentication by default, on a real Redis-compatible server.

- The install's Redis (manifests: its init container's script writes the config
  file, the server reads it) and the docker compose one (its shell script feeds the
  config on stdin) refuse a client without the password, and neither puts the
  password on a command line; the readiness probe's `redis-cli ping` passes with REDISCLI_AUTH only.
- The dispatcher/worker settings (ConfigMap URL + ICACHE_REDIS_PASSWORD from the
  Secret) connect: redis-py (the work queue) and Celery's broker alike.
- `icache certs` creates the password Secret once, never changes it.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from kubernetes import client

from icache_install import redis_auth
from icache_install.manifests_cli import render_manifests
from kubeio.client import ApiError, Kube
from reconciler.queue.celery_app import make_app
from reconciler.queue.redis_settings import redis_url
from reconciler.queue.workqueue import QueueSettings, WorkQueue
from tests.harness.controlplane import (
    ControlPlane,
    free_port,
    spawn_in_own_group,
    terminate_process_group,
    wait_until,
)
from tests.harness.redis_server import RedisServer, find_redis_server, ping
from tests.integration.certs_webhook import icache
from tests.samples import ROOT

PASSWORD = "9f1c0e-test-password"


def compose_interpolate(value: str, env: dict[str, str]) -> str:
    """${VAR:-default} and the $$ escape, as docker compose interpolates them."""

    def one(m: re.Match[str]) -> str:
        return env.get(m.group(1)) or m.group(2)

    value = re.sub(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}", one, value)
    return value.replace("$$", "$")


HARNESS_ARGS = ("--bind", "127.0.0.1", "--logfile", "", "--daemonize", "no")


def install_redis_command(port: int, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The install's Redis as its pod runs it: the init container's shell script (real
    sh, its env from the Secret) writes the config file into what stands for the
    emptyDir, then the server starts with the Redis container's args."""
    (deployment,) = [
        d
        for d in render_manifests()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "inference-cache-redis"
    ]
    spec = deployment["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "auth-config"]
    emptydir = workdir / "auth-config"
    emptydir.mkdir()
    script = init["command"][2].replace(mount["mountPath"], str(emptydir))
    subprocess.run(
        [*init["command"][:2], script],
        env={"PATH": os.environ["PATH"], "REDIS_PASSWORD": PASSWORD},
        check=True,
        timeout=10,
    )
    args = [a.replace(mount["mountPath"], str(emptydir)) for a in container["args"]]
    assert args[0] == "redis-server"
    assert not any(PASSWORD in a for a in args), "no password on the command line"
    command = [find_redis_server(), *args[1:], *HARNESS_ARGS, "--port", str(port),
               "--dir", str(workdir)]  # fmt: skip
    return command, {}


def compose_redis_command(port: int, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The compose Redis as compose runs it: its `sh -c` script (interpolated, with the
    harness's server and flags in place of the image's), the password in its env."""
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    service = compose["services"]["redis"]
    shell, flag, script = service["command"]
    env = {"ICACHE_REDIS_PASSWORD": PASSWORD}
    script = compose_interpolate(script, env)
    assert PASSWORD not in script, "no password on the command line"
    extra = " ".join(
        shlex.quote(a) for a in (*HARNESS_ARGS, "--port", str(port), "--dir", str(workdir))
    )
    script = script.replace("exec redis-server", f"exec {shlex.quote(find_redis_server())}")
    environment = {k: compose_interpolate(v, env) for k, v in service["environment"].items()}
    return [shell, flag, f"{script} {extra}"], environment


@pytest.fixture(params=["manifests", "docker-compose"])
def configured_redis(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[int]:
    """A server started as the install starts it (the image's entrypoint receives
    `redis-server ...`; here the harness binary gets the rest), on a free loopback port."""
    port = free_port("127.0.0.1")
    build = install_redis_command if request.param == "manifests" else compose_redis_command
    command, env = build(port, tmp_path)
    for name, value in env.items():  # the container's environment, inherited
        monkeypatch.setenv(name, value)
    proc = spawn_in_own_group(command, tmp_path / "redis.log", tmp_path)
    try:
        wait_until(
            lambda: ping("127.0.0.1", port, password=PASSWORD),
            timeout=30,
            description=f"{request.param} Redis on {port}",
        )
        yield port
    finally:
        terminate_process_group(proc)


def raw_ping(port: int) -> bytes:
    """What a client that never authenticates gets (no HELLO, plain RESP)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(128)


def test_the_install_redis_refuses_a_client_without_the_password(configured_redis: int) -> None:
    port = configured_redis
    assert raw_ping(port).startswith(b"-NOAUTH")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port).set("k", "v")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, password="wrong").ping()
    authed = redis.Redis.from_url(redis_url(f"redis://127.0.0.1:{port}/0", PASSWORD))
    assert authed.set("k", "v")
    assert authed.get("k") == b"v"


def test_the_readiness_probe_authenticates_with_rediscli_auth(configured_redis: int) -> None:
    """The Redis pod's probe is `redis-cli ping`, given REDISCLI_AUTH from the Secret."""
    cli = str(
        Path(find_redis_server()).with_name(Path(find_redis_server()).name.replace("server", "cli"))
    )
    base = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
    command = [cli, "-h", "127.0.0.1", "-p", str(configured_redis), "ping"]
    with_auth = subprocess.run(
        command, env={**base, "REDISCLI_AUTH": PASSWORD}, capture_output=True, text=True, timeout=30
    )
    assert with_auth.stdout.strip() == "PONG"
    without = subprocess.run(command, env=base, capture_output=True, text=True, timeout=30)
    assert "NOAUTH" in without.stdout + without.stderr


@pytest.fixture
def password_redis() -> Iterator[RedisServer]:
    server = RedisServer(password=PASSWORD).start()
    try:
        yield server
    finally:
        server.stop()


def process_args(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> argparse.Namespace:
    """The dispatcher's Redis flags, parsed as `icache dispatcher` parses them (the
    ICACHE_* variables are bound by icache_cli/main.py) with the pod's environment."""
    from icache_cli.main import build_parser

    monkeypatch.delenv("ICACHE_REDIS_PASSWORD", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    parser, _, _ = build_parser("dispatcher")
    return parser.parse_args(["dispatcher"])


def test_dispatcher_and_worker_settings_connect_with_the_password_from_the_secret(
    password_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = password_redis.url_for_db(3, with_password=False)
    args = process_args(monkeypatch, {"ICACHE_REDIS_URL": bare, "ICACHE_REDIS_PASSWORD": PASSWORD})
    # The work queue (redis-py) ...
    queue = WorkQueue(redis.Redis.from_url(args.redis_url), QueueSettings())
    queue.add("ns/cb")
    assert redis.Redis.from_url(args.redis_url).dbsize() > 0
    # ... and Celery's broker connection.
    app = make_app(args.redis_url)
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1)
        conn.default_channel.client.ping()

    # Without the Secret's password the same settings are refused.
    args = process_args(monkeypatch, {"ICACHE_REDIS_URL": bare})
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(args.redis_url).ping()


# ------------------------------------------------------------------ icache certs


def certs_args(control_plane: ControlPlane, namespace: str, *extra: str) -> list[str]:
    return [
        "certs",
        "--namespace", namespace,
        "--kubeconfig", str(control_plane.kubeconfig_path),
        "--url-base", "https://127.0.0.1:9443",
        "--mutating-config", "",
        "--validating-config", "",
        *extra,
    ]  # fmt: skip


def secret(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


def test_icache_certs_creates_the_redis_password_secret_once(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, namespace: str
) -> None:
    kube = Kube(kube_api_client)
    first = icache(*certs_args(control_plane, namespace))
    assert first.returncode == 0, first.stderr
    created = secret(kube, namespace, redis_auth.DEFAULT_SECRET)
    assert created is not None
    assert created["type"] == "Opaque"
    password = base64.b64decode(created["data"]["password"]).decode()
    assert re.fullmatch(r"[0-9a-f]{64}", password)

    again = icache(*certs_args(control_plane, namespace))
    assert again.returncode == 0, again.stderr
    kept = secret(kube, namespace, redis_auth.DEFAULT_SECRET)
    assert kept is not None
    assert kept["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_icache_certs_keeps_an_operators_secret_and_can_skip(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, namespace: str
) -> None:
    kube = Kube(kube_api_client)
    mine = base64.b64encode(b"operator-chosen").decode()
    kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        body={"metadata": {"name": "redis-auth"}, "data": {"password": mine}},
    )
    ok = icache(*certs_args(control_plane, namespace, "--redis-secret", "redis-auth"))
    assert ok.returncode == 0, ok.stderr
    kept = secret(kube, namespace, "redis-auth")
    assert kept is not None
    assert kept["data"] == {"password": mine}

    skipped = icache(*certs_args(control_plane, namespace, "--redis-secret", ""))
    assert skipped.returncode == 0, skipped.stderr
    assert secret(kube, namespace, redis_auth.DEFAULT_SECRET) is None

    kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        body={"metadata": {"name": "wrong-shape"}, "data": {"pass": mine}},
    )
    bad = icache(*certs_args(control_plane, namespace, "--redis-secret", "wrong-shape"))
    assert bad.returncode == 1
    assert "no 'password' key" in bad.stderr
