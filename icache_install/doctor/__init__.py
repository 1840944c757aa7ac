"""`icache doctor`: a read-only health check of the install, the CacheBackends and
their engine pods (docs/doctor.md)."""
