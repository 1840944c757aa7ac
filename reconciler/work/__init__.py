"""The Celery worker process: its composition, the reconcile task and the worker's own loops."""
