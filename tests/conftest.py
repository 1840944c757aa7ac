"""Session-wide fixtures for the real things: kube-apiserver + etcd (bare, and with
the controllers and kwok), and Redis.

The logic lives in ``tests/harness``; this file only wires it into pytest.
Nothing is skipped: if the control-plane binaries are missing they are built
(``tests/controlplane/build.sh``) and a failing build fails the tests.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.harness.controlplane import ControlPlane
from tests.harness.redis_server import RedisServer, server_banner
from tests.harness.watch_leaks import WATCH_LOGGER, WatchFailureLog

_TESTS = Path(__file__).resolve().parent


# Fixtures that start a real process; a test using any of them (directly or
# through another fixture) is not a pure unit test.
_SERVICE_FIXTURES = frozenset(
    {
        "control_plane",
        "controller_plane",
        "kube_api_client",
        "redis_server",
        "own_redis",
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


# Seconds spent per suite (tests/<suite>/...): setup, call and teardown of its tests,
# session fixtures included where they start. Printed at the end of the run.
_SUITE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    parts = report.nodeid.split("::", 1)[0].split("/")
    suite = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
    _SUITE_SECONDS[suite] = _SUITE_SECONDS.get(suite, 0.0) + report.duration


# "watch failed" lines logged outside a test's body: watches that outlived the test or
# fixture that started them (tests/harness/watch_leaks.py). Any fails the run.
_WATCH_LOG = WatchFailureLog()


def pytest_sessionstart(session: pytest.Session) -> None:
    logging.getLogger(WATCH_LOGGER).addHandler(_WATCH_LOG)


def pytest_sessionfinish(session: pytest.Session) -> None:
    logging.getLogger(WATCH_LOGGER).removeHandler(_WATCH_LOG)
    if _WATCH_LOG.leaked and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The watches that outlived their test, then the time of each suite, so a slow one
    shows against CI's budget."""
    if _WATCH_LOG.leaked:
        terminalreporter.section("watches that outlived their test (the run fails)")
        for line in _WATCH_LOG.leaked:
            terminalreporter.write_line(line)
    if not _SUITE_SECONDS:
        return
    terminalreporter.section("suite times")
    for suite, seconds in sorted(_SUITE_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{suite:<14} {seconds / 60:6.1f} min  ({seconds:.0f}s)")
    total = sum(_SUITE_SECONDS.values())
    terminalreporter.write_line(f"{'total':<14} {total / 60:6.1f} min  ({total:.0f}s)")


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
        if _SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())) or (
            item.get_closest_marker("real_controllers") is not None
        ):
            item.add_marker(pytest.mark.services)


# The markers of the tests `make unit` leaves out.
_NOT_PURE = ("services", "integration", "e2e")


@contextmanager
def _no_process_unless_marked(item: pytest.Item) -> Iterator[None]:
    """A test `make unit` runs may not start a process (docs/testing.md), neither in
    its body nor in a fixture it is the first to need: one that does fails, saying to
    mark it ``services``, instead of slowing the pure suite. Teardown is not checked:
    the last test of a run tears down the session's fixtures, whoever started them."""
    if any(item.get_closest_marker(name) for name in _NOT_PURE):
        yield
        return
    original = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError(
            f"{item.nodeid} starts a process: mark it @pytest.mark.services "
            "(make unit runs only the tests that start none)"
        )

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]


@contextmanager
def _phase(item: pytest.Item, phase: str) -> Iterator[None]:
    _WATCH_LOG.enter(item.nodeid, phase)
    try:
        yield
    finally:
        _WATCH_LOG.leave(item.nodeid, phase)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item, "setup"), _no_process_unless_marked(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item, "call"), _no_process_unless_marked(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item, "teardown"):
        return (yield)


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
def controller_plane() -> Iterator[ControlPlane]:
    """A second control plane for the session, with kube-controller-manager,
    kube-scheduler and kwok managing fake GPU and CPU nodes: workloads really roll
    out there. Started on first use only."""
    cp = ControlPlane(controllers=True)
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


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis-compatible server of the test's own: freezing or killing the session's
    would stall other tests' clients."""
    with RedisServer() as server:
        yield server
