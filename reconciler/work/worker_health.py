"""The Celery worker's liveness heartbeat: beaten from inside the consumer's event loop.

A Celery consumer bootstep schedules a repeating timer on the worker's event loop
(kombu's hub), the same loop that fetches messages and hands them to the pool (the
pool's children, with prefork, only run tasks). The timer fires only while that loop
turns, so its heartbeat goes stale when the loop is stuck: blocked in a broker call,
or reconnecting to a broker that does not answer.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps

from reconciler.health import Heartbeat

CONSUMER_LOOP = "consumer-loop"


def install_consumer_heartbeat(app: Celery, heartbeat: Heartbeat, interval: float) -> None:
    # celery ships no types: its bootstep base class is Any to mypy.
    class ConsumerHeartbeat(bootsteps.StartStopStep):  # type: ignore[misc]
        requires = ("celery.worker.consumer.tasks:Tasks",)

        def __init__(self, parent: Any, **kwargs: Any) -> None:
            super().__init__(parent, **kwargs)
            self.entry: Any = None

        def start(self, c: Any) -> None:
            heartbeat.beat(CONSUMER_LOOP)
            # Without an event loop (a non-async transport) the consumer's own
            # timer is the closest thing to its loop.
            timer = c.hub.timer if getattr(c, "hub", None) is not None else c.timer
            self.entry = timer.call_repeatedly(interval, heartbeat.beat, (CONSUMER_LOOP,))

        def stop(self, c: Any) -> None:  # noqa: ARG002 (the bootstep interface)
            if self.entry is not None:
                self.entry.cancel()
                self.entry = None

        def shutdown(self, c: Any) -> None:
            self.stop(c)

    app.steps["consumer"].add(ConsumerHeartbeat)
