"""The reconciler: the dispatcher and worker processes and what they share, in rooms.

``dispatch/`` (the dispatcher process) and ``work/`` (the Celery worker process) sit
over ``queue/`` (the Redis work queue, Celery and Redis plumbing) and ``watch/`` (the
watches and caches, which backends a change wakes), over ``steps/`` (one reconcile),
over ``status/`` (the pure rules). ``metrics``, ``health`` and ``cli_common`` serve both
processes. docs/architecture.md draws the map; pyproject.toml's import contracts keep it.
"""
