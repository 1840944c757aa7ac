"""Install tooling: `icache certs` and `icache manifests`.

Kept out of `shared/` (which both long-running processes import): nothing here runs
in the webhook, dispatcher or worker; it may import `shared` and nothing else of
ours (an import-linter contract checks it).
"""
