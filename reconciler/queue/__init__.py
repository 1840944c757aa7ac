"""The Redis work queue and the Celery/Redis plumbing both processes share."""
