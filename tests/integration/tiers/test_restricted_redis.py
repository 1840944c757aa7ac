"""A real Redis-compatible server runs as the managed Redis pod's user (uid/gid 999,
no root) with the rendered command line, and writes nothing: what the hardened pod
needs (decision "Managed tiers restricted by default": runAsNonRoot with the image's
user, a read-only root filesystem with an emptyDir at /data)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared import constants as c
from shared.storage_providers.base import AUTH_CONFIG_DIR, AUTH_CONFIG_PATH
from shared.storage_providers.redis import RedisStorageProvider
from shared.storage_providers.render import render_managed_objects
from tests.builders import managed_spec, rendered_backend
from tests.harness.controlplane import free_port, terminate_process_group, wait_until
from tests.harness.redis_server import find_redis_server, ping

PASSWORD = "p" * 64


def rendered_pod() -> dict[str, Any]:
    objs = render_managed_objects(rendered_backend(managed_spec(c.PROVIDER_REDIS)))
    (workload,) = [o for o in objs if o["kind"] == "Deployment"]
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def resp(port: int, *commands: list[str]) -> list[bytes]:
    """One reply line per command, on one connection."""
    out: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for cmd in commands:
            payload = b"*%d\r\n" % len(cmd) + b"".join(
                b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in cmd
            )
            sock.sendall(payload)
            out.append(sock.recv(256).split(b"\r\n")[0])
    return out


def server_for_pod_user(data_dir: Path) -> str:
    """A copy of the server binary uid 999 can execute: the checkout may sit under a
    directory only root can enter (``mktemp -d`` makes them 0700)."""
    target = data_dir.parent / f"{data_dir.name}-server"
    shutil.copy(find_redis_server(), target)
    target.chmod(0o755)
    return str(target)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """The emptyDir at /data: owned by the pod's fsGroup, as the kubelet makes it."""
    path = Path(tempfile.mkdtemp(prefix="icache-redis-data-"))
    pod = rendered_pod()
    os.chown(path, pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"])
    path.chmod(0o2770)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as uid 999 needs root")
def test_redis_runs_as_the_pod_user_with_the_rendered_args(data_dir: Path) -> None:
    pod = rendered_pod()
    psc = pod["securityContext"]
    container = pod["containers"][0]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/data", AUTH_CONFIG_DIR]
    # The config file the Secret volume mounts, world-readable as its defaultMode
    # makes it; the pod's port and bind address are replaced by a free loopback port
    # (the appended flags win).
    conf = data_dir.parent / f"{data_dir.name}.conf"
    conf.write_text(RedisStorageProvider().auth_config(PASSWORD))
    conf.chmod(0o444)
    args = [str(conf) if a == AUTH_CONFIG_PATH else a for a in container["args"]]
    assert args[0] == "redis-server"
    port = free_port()
    log = data_dir.parent / f"{data_dir.name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [server_for_pod_user(data_dir), *args[1:], "--port", str(port), "--bind", "127.0.0.1"],
            cwd=data_dir,
            user=psc["runAsUser"],
            group=psc["runAsGroup"],
            extra_groups=[psc["fsGroup"]],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: ping("127.0.0.1", port, password=PASSWORD),
            timeout=20,
            description="redis as uid 999",
            abort=lambda: None if proc.poll() is None else f"exited {proc.returncode}",
        )
        status = Path(f"/proc/{proc.pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert uid_line.split()[1:] == [str(psc["runAsUser"])] * 4, uid_line
        assert resp(port, ["PING"])[0].startswith(b"-NOAUTH")
        assert resp(port, ["AUTH", PASSWORD], ["SET", "k", "v"], ["GET", "k"])[:2] == [
            b"+OK",
            b"+OK",
        ]
        # No RDB, no AOF: the working directory (the emptyDir) stays empty, so a
        # read-only root filesystem loses nothing.
        assert resp(port, ["AUTH", PASSWORD], ["SHUTDOWN"])[0] == b"+OK"
        proc.wait(timeout=20)
        assert list(data_dir.iterdir()) == []
    finally:
        terminate_process_group(proc)
        log.unlink(missing_ok=True)
        conf.unlink(missing_ok=True)
        (data_dir.parent / f"{data_dir.name}-server").unlink(missing_ok=True)
