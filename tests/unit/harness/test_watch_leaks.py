"""The session check that no watch outlives its test (tests/harness/watch_leaks.py,
wired in tests/conftest.py): a "watch failed" line logged outside a test's body is
recorded with where it was logged, one logged in a test's body (a test breaking a
watch on purpose) is not, and other lines are ignored."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.harness.watch_leaks import WATCH_FAILED, WATCH_LOGGER, WatchFailureLog


def _record(msg: str, **extra: str) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": WATCH_LOGGER, "levelno": logging.WARNING, "msg": msg, **extra}
    )


def test_a_watch_failure_outside_a_tests_body_is_recorded_with_where() -> None:
    log = WatchFailureLog()
    log.handle(_record(WATCH_FAILED, resource="pods", error="refused"))
    log.enter("t.py::a", "setup")
    log.handle(_record(WATCH_FAILED, resource="pods", error="refused"))
    log.leave("t.py::a", "setup")
    log.enter("t.py::a", "call")
    log.handle(_record(WATCH_FAILED, resource="pods", error="dropped on purpose"))
    log.leave("t.py::a", "call")
    log.handle(_record(WATCH_FAILED, resource="secrets", error="reset"))
    log.enter("t.py::a", "teardown")
    log.handle(_record(WATCH_FAILED, resource="deployments", error="reset"))
    log.handle(_record("watch resourceVersion expired; re-listing"))
    assert log.leaked == [
        "before the first test: watch of pods failed: refused",
        "t.py::a (setup): watch of pods failed: refused",
        "after t.py::a (call): watch of secrets failed: reset",
        "t.py::a (teardown): watch of deployments failed: reset",
    ]


def test_the_check_listens_where_the_watch_loop_logs() -> None:
    """The logger and message are the ones reconciler/watch/watch_cache.py uses."""
    from reconciler.watch import watch_cache

    assert watch_cache.log.name == WATCH_LOGGER
    source = Path(watch_cache.__file__).read_text()
    assert f'log.warning("{WATCH_FAILED}"' in source
