"""One path from a change to the work queue (docs/decisions.md, "Layout: one path from
a change to the work queue"): the leading dispatcher is the only process kind that
adds keys. Read with ``ast``: every call of the work queue's ``add`` in the product is
in the dispatcher's module, and the worker's composition root hands its caches no way
to add (the cache takes no queue and no callback)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from reconciler.watch.cluster_cache import ClusterCache

REPO = Path(__file__).resolve().parents[3]
PRODUCT = ("shared", "kubeio", "cli_support", "icache_cli", "webhook_svc", "reconciler",
           "icache_install")  # fmt: skip
THE_ENQUEUER = "reconciler/dispatch/dispatcher.py"


def _queue_adds(path: Path) -> list[int]:
    """Lines calling ``<something queue>.add(``: the work queue's add."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add"
            and "queue" in ast.unparse(node.func.value).lower()
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_dispatcher_adds_to_the_work_queue() -> None:
    adders = {
        str(path.relative_to(REPO))
        for package in PRODUCT
        for path in (REPO / package).rglob("*.py")
        if _queue_adds(path)
    }
    assert adders == {THE_ENQUEUER}


def test_a_workers_cache_has_no_way_to_add() -> None:
    params = set(inspect.signature(ClusterCache).parameters)
    assert params == {"kube", "watch_timeout"}
