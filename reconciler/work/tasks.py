"""The reconcile task: one key, start to finish, read top to bottom.

1. the process's clients (:func:`reconciler.work.worker_runtime.runtime`);
2. the key's lease in the work queue (:meth:`reconciler.queue.workqueue.WorkQueue.leased`:
   claimed, renewed while the reconcile runs, released after);
3. where it reads: the key's fences, the changes the dispatcher added it for, waited
   for in the process's caches (:meth:`reconciler.work.worker_runtime.Runtime.reads_for`;
   the API server if a cache stays behind);
4. the reconcile, its writes fenced on that lease (:mod:`reconciler.work.lease_fence`,
   :meth:`reconciler.steps.reconcile.Reconciler.reconcile`);
5. the outcome recorded in the work queue (:meth:`~reconciler.queue.workqueue.WorkQueue.done`:
   requeue, retry with backoff, or finished), and, after a success, the fences it
   waited for cleared;
6. the outcome counted (:func:`reconciler.metrics.reconciled`).
"""

from __future__ import annotations

import logging
import time

import redis
from celery import Celery

from reconciler import metrics
from reconciler.queue.celery_app import RECONCILE_TASK
from reconciler.queue.workqueue import DONE, WorkQueue
from reconciler.steps.reads import ClusterReads
from reconciler.steps.reconcile import ReconcileResult
from reconciler.watch.freshness import decode_all
from reconciler.work.lease_fence import LeaseExpiredError, holding
from reconciler.work.worker_runtime import Runtime, runtime

log = logging.getLogger(__name__)
# One DEBUG line when a reconcile starts and one when it ends, with the lease token
# and a system-wide monotonic timestamp: enough to prove from the logs of several
# worker processes that no key ever ran in two places at once. Off unless this
# logger is turned on (ICACHE_DEBUG_LOGGERS=reconciler.trace).
trace = logging.getLogger("reconciler.trace")


def run_key(key: str) -> str:
    """Run one reconcile of ``key`` under the work queue's lease."""
    rt = runtime()
    try:
        with rt.queue.leased(key) as token:
            if token is None:
                return "skipped"
            started = time.monotonic()
            fences = _fences(rt.queue, key)
            reads = rt.reads_for(decode_all(fences) if fences is not None else None)
            result = _reconcile_fenced(rt, key, token, started, reads)
            if result is None:
                outcome = "error"
                _finish(rt.queue, key, token, error=True, requeue_after=None)
            else:
                outcome = "requeue" if result.requeue_after else "success"
                _finish(rt.queue, key, token, error=False, requeue_after=result.requeue_after)
                _clear_fences(rt.queue, key, fences)
                if result.writes:
                    log.info(
                        "reconciled",
                        extra={"key": key, "mode": result.mode, "writes": result.writes},
                    )
            elapsed = time.monotonic() - started
            metrics.reconciled(metrics.REQUEUE_AFTER if outcome == "requeue" else outcome, elapsed)
            return outcome
    except redis.RedisError as exc:
        # Could not even claim the key: it stays queued and the dispatcher's reaper
        # (or the resync after a Redis restart) hands it out again.
        log.warning("work queue unavailable", extra={"key": key, "error": str(exc)})
        return "unavailable"


def _fences(queue: WorkQueue, key: str) -> dict[str, str] | None:
    """The key's fences; None when Redis cannot say (the run then reads the API server)."""
    try:
        return queue.fences(key)
    except redis.RedisError as exc:
        log.warning("could not read the key's fences", extra={"key": key, "error": str(exc)})
        return None


def _clear_fences(queue: WorkQueue, key: str, fences: dict[str, str] | None) -> None:
    """Best effort: a fence left behind is passed at once by the next run, and expires."""
    try:
        queue.clear_fences(key, fences or {})
    except redis.RedisError as exc:
        log.debug("could not clear the key's fences", extra={"key": key, "error": str(exc)})


def _reconcile_fenced(
    rt: Runtime, key: str, token: str, started: float, reads: ClusterReads | None
) -> ReconcileResult | None:
    """The reconcile, its writes fenced on the lease ``token``; None: it failed (logged)."""
    trace.debug("reconcile start", extra={"key": key, "token": token, "mono": started})
    try:
        try:
            with holding(rt.queue, key, token):
                return rt.reconciler.reconcile(key, reads)
        finally:
            trace.debug(
                "reconcile end", extra={"key": key, "token": token, "mono": time.monotonic()}
            )
    except LeaseExpiredError:
        log.warning("reconcile fenced: lease not renewed in time, not writing", extra={"key": key})
    except Exception:
        log.exception("reconcile failed", extra={"key": key})
    return None


def _finish(
    queue: WorkQueue, key: str, token: str, *, error: bool, requeue_after: float | None
) -> None:
    """Record the outcome, riding out a short Redis outage. If Redis stays away the
    lease simply expires and the key is re-run (or re-listed): nothing is lost."""
    deadline = time.monotonic() + queue.settings.lease_seconds
    while True:
        try:
            outcome, delay = queue.done(key, token, error=error, requeue_after=requeue_after)
            if outcome != DONE:
                log.warning(
                    "lease was taken over while running; outcome dropped", extra={"key": key}
                )
            elif error:
                log.info("retrying after an error", extra={"key": key, "delay_s": delay})
            return
        except redis.RedisError as exc:
            if time.monotonic() > deadline:
                log.error("could not record the outcome", extra={"key": key, "error": str(exc)})
                return
            time.sleep(0.5)


def register_tasks(app: Celery) -> None:
    def reconcile_task(key: str) -> str:
        return run_key(key)

    # Registered by a call, not as a decorator: celery is untyped, and an untyped
    # decorator would erase the function's type (mypy --strict).
    app.task(name=RECONCILE_TASK, ignore_result=True)(reconcile_task)
