"""A session-wide check that every watch a test starts ends with it.

A watch the product runs in the test process (a worker's :class:`ClusterCache`, a
:class:`Reflector`) logs ``watch failed`` when its API server goes away while it still
runs. A test that breaks a watch on purpose does so in its body; the same line logged
anywhere else (a fixture's teardown, between tests, when a session's control plane
stops) comes from a watch that outlived the test or fixture that started it, and reads
as a failure to whoever runs the suite. :class:`WatchFailureLog` records those, and
tests/conftest.py fails the run that logged any, naming where each was logged.
"""

from __future__ import annotations

import logging
from typing import Final

# The logger and message of a failed list or watch (reconciler/watch/watch_cache.py).
WATCH_LOGGER: Final = "reconciler.watch.watch_cache"
WATCH_FAILED: Final = "watch failed"


class WatchFailureLog(logging.Handler):
    """Records each ``watch failed`` line logged outside a test's body (its call
    phase), with where it was logged: the current test and phase, or the last one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.where = "before the first test"
        self.calling = False
        self.leaked: list[str] = []

    def enter(self, nodeid: str, phase: str) -> None:
        self.where = f"{nodeid} ({phase})"
        self.calling = phase == "call"

    def leave(self, nodeid: str, phase: str) -> None:
        self.where = f"after {nodeid} ({phase})"
        self.calling = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() != WATCH_FAILED or self.calling:
            return
        resource = getattr(record, "resource", "?")
        error = getattr(record, "error", "")
        self.leaked.append(f"{self.where}: watch of {resource} failed: {error}")
