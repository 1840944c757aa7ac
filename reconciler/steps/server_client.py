"""Client of the cache-index server's /probe and /snapshot (docs/server-contract.md)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Final, Protocol

import httpx

from reconciler.status.observed import ProbeObservation

log = logging.getLogger(__name__)

DEFAULT_TOKEN_PATH: Final = "/var/run/secrets/inferencecache.io/controller-token/token"
TIMEOUT_SECONDS: Final = 5.0
STAGES: Final = ("ingest", "routing", "t2")


class Prober(Protocol):
    """What a reconcile needs of the cache-index server: one functional probe."""

    def probe(
        self, backend: str, model: str, hash_scheme: str, backend_type: str | None
    ) -> ProbeObservation:
        """One functional probe of ``backend`` for ``model`` under ``hash_scheme``."""


class ServerClient:
    def __init__(
        self,
        base_url: str,
        *,
        token_path: str = DEFAULT_TOKEN_PATH,
        timeout: float = TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_path = Path(token_path)
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def _headers(self) -> dict[str, str]:
        # Read on every call: the projected token rotates. No file: local development,
        # no header. A file that exists but cannot be read is an error.
        if not self.token_path.exists():
            return {}
        token = self.token_path.read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    def probe(
        self, backend: str, model: str, hash_scheme: str, backend_type: str | None
    ) -> ProbeObservation:
        body: dict[str, Any] = {"backend": backend, "model": model, "hashScheme": hash_scheme}
        if backend_type:
            body["backendType"] = backend_type
        try:
            resp = self._http.post(f"{self.base_url}/probe", json=body, headers=self._headers())
        except (httpx.HTTPError, OSError) as exc:
            return ProbeObservation("error", message=f"POST /probe: {exc}")
        if resp.status_code >= 500:
            # "Could not reach": the gate stays Unknown (docs/server-contract.md).
            return ProbeObservation("error", message=f"POST /probe: HTTP {resp.status_code}")
        try:
            result = resp.json()
        except ValueError:
            result = None
        observation = interpret_probe_result(result)
        if resp.status_code >= 400 and observation.outcome == "failed":
            # The server answered and refused (a bad token, a bad request): a result
            # that is not a pass fails closed, like any other, and says the status.
            observation = dataclasses.replace(
                observation, message=f"POST /probe: HTTP {resp.status_code}: {observation.message}"
            )
        return observation

    def snapshot(self) -> dict[str, Any]:
        resp = self._http.get(f"{self.base_url}/snapshot", headers=self._headers())
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data


def interpret_probe_result(result: Any) -> ProbeObservation:
    """Pass only when every stage is ok or skipped; an empty result fails closed."""
    if not isinstance(result, dict) or not any(result.get(s) for s in STAGES):
        return ProbeObservation("failed", failed_stage="ingest", message="empty probe result")
    errors = {
        str(e.get("stage")): str(e.get("message") or "")
        for e in result.get("errors") or []
        if isinstance(e, dict)
    }
    for stage in STAGES:
        value = result.get(stage)
        if value not in ("ok", "skipped"):
            message = errors.get(stage) or f"probe stage {stage} reported {value or 'nothing'}"
            return ProbeObservation("failed", failed_stage=stage, message=message)
    return ProbeObservation("ok")
