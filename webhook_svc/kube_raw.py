"""Raw JSON requests to the API server with the kubernetes client's pool and auth.

The generated kubernetes client validates every argument with pydantic, builds model
objects and sanitises them back to dicts; on the admission hot path (one CacheBackend
LIST per Pod admission, one SubjectAccessReview per workload-shaping CacheBackend
write) that was most of the webhook's own CPU per request (issue 12 profile). This
sends the same request through the same urllib3 pool (TLS, client certificate,
keep-alive connections) with the same auth headers (bearer token, refreshed by the
client's hook) and decodes the answer with orjson.
"""

from __future__ import annotations

from typing import Any

import orjson
import urllib3


class RawKube:
    def __init__(self, api_client: Any) -> None:
        self._client = api_client
        self._pool = api_client.rest_client.pool_manager
        self._host = str(api_client.configuration.host).rstrip("/")

    def request(
        self, method: str, path: str, timeout: float, body: Any = None
    ) -> tuple[int, str, bytes]:
        """(HTTP status, reason, body bytes); raises on a connection error or timeout."""
        headers: dict[str, str] = {"Accept": "application/json", **self._client.default_headers}
        payload = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            payload = orjson.dumps(body)
        self._client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        reply = self._pool.request(
            method,
            self._host + path,
            body=payload,
            headers=headers,
            timeout=urllib3.Timeout(total=timeout),
        )
        return int(reply.status), str(reply.reason or ""), bytes(reply.data)
