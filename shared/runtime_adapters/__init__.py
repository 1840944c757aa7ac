"""Runtime (engine-wire) adapters: one module per (runtime, cache type) pair, in a registry."""
