"""CacheBackend API: pydantic models, schema defaults and the CRD generated from them."""
