"""Session-wide fixtures for the real things: kube-apiserver + etcd, and Redis.

The logic lives in ``tests/harness``; this file only wires it into pytest.
Nothing is skipped: if the control-plane binaries are missing they are built
(``tests/controlplane/build.sh``) and a failing build fails the tests.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.harness.controlplane import ControlPlane
from tests.harness.redis_server import RedisServer, server_banner

_TESTS = Path(__file__).resolve().parent


# Fixtures that start a real process; a test using any of them (directly or
# through another fixture) is not a pure unit test.
_SERVICE_FIXTURES = frozenset(
    {
        "control_plane",
        "kube_api_client",
        "redis_server",
        "kustomize_bin",
        "promtool_bin",
        "helm_bin",
    }
)


def pytest_report_header() -> str:
    """Say which Redis-compatible server the run uses (redis-server or valkey)."""
    try:
        return f"redis-compatible server: {server_banner()}"
    except Exception as exc:  # the header must not fail collection
        return f"redis-compatible server: unavailable ({exc})"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by directory so ``-m "not integration"`` etc. work, and mark
    every test that needs a real process as ``services`` (``make unit`` skips
    them)."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if (_TESTS / "integration") in path.parents:
            item.add_marker(pytest.mark.integration)
        elif (_TESTS / "e2e") in path.parents:
            item.add_marker(pytest.mark.e2e)
        if _SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver shared by the whole session."""
    cp = ControlPlane()
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kube_api_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """An admin (system:masters) ``ApiClient`` for ``control_plane``."""
    api = control_plane.api_client()
    try:
        yield api
    finally:
        api.close()


def _go_tool(script_name: str) -> Path:
    """A pinned Go tool, built from the Go module proxy on first use by its script in
    ``tests/tools`` (cached outside the tree); a failing build fails the test."""
    script = _TESTS / "tools" / script_name
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def kustomize_bin() -> Path:
    """The pinned kustomize (``tests/tools/kustomize.sh``)."""
    return _go_tool("kustomize.sh")


@pytest.fixture(scope="session")
def promtool_bin() -> Path:
    """The pinned promtool (``tests/tools/promtool.sh``)."""
    return _go_tool("promtool.sh")


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The pinned helm (``tests/tools/helm.sh``)."""
    return _go_tool("helm.sh")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A running, non-persistent Redis-compatible server on a free loopback port."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
