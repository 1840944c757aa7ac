"""The reconciler logs key=value extras, as the webhook does.

A log line's message is a constant sentence; what varies (the backend key, the
object, the error, a delay) goes in ``extra=`` so the JSON formatter emits it as its
own field and a log query can filter on it. Statically: no logging call in the
reconciler formats values into its message. Behaviourally: a reconcile's
lines carry ``key``.
"""

from __future__ import annotations

import ast
import datetime as dt
import logging
import re
from pathlib import Path

import pytest

from shared.jsonlog import JsonFormatter
from tests.fakes import FakeKube, in_process_reconciler

REPO = Path(__file__).resolve().parents[3]
_LOGS = re.compile(r"\blog\.(debug|info|warning|error|exception|critical)\(")
MODULES = sorted(
    p.relative_to(REPO / "reconciler").as_posix()
    for p in (REPO / "reconciler").rglob("*.py")
    if _LOGS.search(p.read_text())
)
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def _log_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LEVELS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "log"
    ]


@pytest.mark.parametrize("module", MODULES)
def test_log_messages_are_constant_and_values_are_extras(module: str) -> None:
    path = REPO / "reconciler" / module
    calls = _log_calls(path)
    assert calls, f"no log calls found in {module}: the scan is broken"
    bad = [
        f"{module}:{call.lineno}"
        for call in calls
        if len(call.args) != 1
        or not isinstance(call.args[0], ast.Constant)
        or "%" in str(call.args[0].value)
    ]
    assert not bad, f"format values into extra=, not the message: {bad}"


NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_a_reconcile_logs_the_key_as_a_field(caplog: pytest.LogCaptureFixture) -> None:
    kube = FakeKube()
    kube.put(
        "cachebackends",
        {
            "apiVersion": "inferencecache.io/v1alpha1",
            "kind": "CacheBackend",
            "metadata": {"name": "cb", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"runtime": "VLLM", "replicas": "many"},
        },
    )
    with caplog.at_level(logging.INFO, logger="reconciler"):
        in_process_reconciler(kube, clock=lambda: NOW).reconcile("ns/cb")
    (record,) = [r for r in caplog.records if r.name == "reconciler.steps.reconcile"]
    assert record.getMessage() == "unreadable CacheBackend; waiting for it to change"
    assert getattr(record, "key", None) == "ns/cb"
    line = JsonFormatter().format(record)
    assert '"key": "ns/cb"' in line
    assert '"error": ' in line
