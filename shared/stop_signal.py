"""The stop switch of a component that runs a background loop on a daemon thread.

The loop waits on ``_stop`` (``threading.Event``) between rounds; ``stop()`` ends it at
the next wait. The dispatcher, the readiness checker, the watch-cache reflector and the
webhook's certificate reloader share it.
"""

from __future__ import annotations

import threading


class StopSignal:
    """Mixed into a class whose ``__init__`` sets ``self._stop = threading.Event()``."""

    _stop: threading.Event

    def stop(self) -> None:
        """End the background loop at its next wait (the thread is a daemon)."""
        self._stop.set()
