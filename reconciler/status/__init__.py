"""The pure rules: a CacheBackend's conditions, its Events and the cascade decisions.

Nothing here does I/O or imports another room of the reconciler."""
