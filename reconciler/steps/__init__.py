"""One reconcile: its reads, the comparisons that decide a write, and its clients."""
