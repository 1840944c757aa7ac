"""Lease fencing: no write for a key whose work-queue lease may have lapsed.

A reconcile runs while its worker holds the key's lease in the work queue
(:meth:`reconciler.queue.workqueue.WorkQueue.leased`, renewed in the background). If the
renewals stop reaching Redis (Redis unreachable, the process starved), the reaper may
hand the key to another worker once the lease expires, and two workers must never
write for one key at once. :func:`holding` marks the lease the current thread's
reconcile runs under; :class:`FencedKube` checks it before every write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubeio.client import JSON_ACCEPT, Kube
from reconciler.queue.workqueue import WorkQueue


class LeaseExpiredError(RuntimeError):
    """The work-queue lease of the key being reconciled may have lapsed."""


# The (queue, key, token) of the reconcile running on this thread, for FencedKube.
_running = threading.local()


@contextmanager
def holding(queue: WorkQueue, key: str, token: str) -> Iterator[None]:
    """This thread's writes, until the block ends, are for ``key`` under ``token``."""
    _running.lease = (queue, key, token)
    try:
        yield
    finally:
        _running.lease = None


def check_lease() -> None:
    """Raise LeaseExpiredError when this thread's reconcile may no longer hold its key:
    less than a sixth of the lease is left since the last renewal Redis confirmed
    (with renewals every third, that is one and a half missed renewals)."""
    lease = getattr(_running, "lease", None)
    if lease is None:
        return
    queue, key, token = lease
    until = queue.lease_valid_until(key, token)
    if until is not None and time.monotonic() > until - queue.settings.lease_seconds / 6:
        raise LeaseExpiredError(f"{key}: work-queue lease not renewed in time; not writing")


class FencedKube(Kube):
    """A Kube that refuses to write for a reconcile whose work-queue lease could not
    be renewed in time: reads go through; the reconcile fails on its next write and
    the key is retried (or has already been handed on)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str = JSON_ACCEPT,
    ) -> dict[str, Any]:
        if method != "GET":
            check_lease()
        return super().request(
            method, path, query=query, body=body, content_type=content_type, accept=accept
        )
