"""The webhook's HTTP and process layer: sockets, worker processes, TLS, connection
states and draining, request bodies under byte budgets, the JSON codec and the
process metrics. It knows nothing of admission: the admission modules above import it,
never the reverse (an import-linter contract in pyproject.toml)."""
