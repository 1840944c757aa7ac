"""The unread-variables listing, printed at the end of the run (test_unread.py fills it)."""

from __future__ import annotations

import pytest

from tests.engine_contracts.unread import UNREAD_BY_ENGINES

# variable -> releases, as the last test_unread run found it.
FOUND: dict[str, tuple[str, ...]] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FOUND:
        return
    terminalreporter.section("injected variables no engine release reads (reported, not failed)")
    for variable, readers in sorted(FOUND.items()):
        mark = "" if UNREAD_BY_ENGINES.get(variable) == readers else "  (not in UNREAD_BY_ENGINES)"
        terminalreporter.write_line(f"{variable}: {', '.join(readers)}{mark}")
