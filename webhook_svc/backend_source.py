"""Where the Pod webhook reads CacheBackends from: the live API, or YAML files (embedded mode).

Live mode lists uncached on every admission: an informer-cache miss on a freshly
Ready backend would leave a pod permanently unwired, since pod CREATE is one-shot.
Embedded mode re-reads the directory only when a file's mtime or the file set changes.
A file backend without ``metadata.namespace`` (loaded with namespace "") joins whichever
namespace asks, as ``kubectl apply -n <ns> -f`` would place it: a directory of backends
written without namespaces wires pods in any namespace, while a backend that names its
namespace is seen there only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from kubeio.async_client import ApiServer
from kubeio.resources import CACHEBACKENDS
from shared.objects import metadata


class BackendSource(Protocol):
    async def list(self, namespace: str) -> list[dict[str, Any]]:
        """The CacheBackends of ``namespace``, as JSON objects."""


# The Pod webhook's timeoutSeconds is 5: the lookup must give up well before the API
# server does, or the fail-open answer arrives after the API server stopped listening.
DEFAULT_LIST_TIMEOUT_SECONDS: Final = 2.0


class ListFailedError(RuntimeError):
    """The API server did not answer the CacheBackend list with 200."""


def list_items(status: int, data: bytes) -> list[dict[str, Any]]:
    """The items of a CacheBackend LIST answer, or ListFailedError."""
    if status != 200:
        raise ListFailedError(f"HTTP {status}: {data[:200]!r}")
    items: list[dict[str, Any]] = orjson.loads(data).get("items") or []
    return items


def _fingerprint(directory: Path) -> tuple[tuple[str, int, int], ...]:
    entries = []
    for path in sorted(directory.rglob("*")):
        if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
            st = path.stat()
            entries.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(entries)


class FileBackendSource:
    """CacheBackends from YAML files in a directory; other kinds ignored, status honoured."""

    def __init__(self, directory: Path, loader: Callable[[Path], list[dict[str, Any]]]) -> None:
        self._directory = directory
        self._loader = loader
        self._fingerprint: tuple[tuple[str, int, int], ...] | None = None
        self._by_namespace: dict[str, list[dict[str, Any]]] = {}

    def _refresh(self) -> None:
        fingerprint = _fingerprint(self._directory)
        if fingerprint == self._fingerprint:
            return
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for backend in self._loader(self._directory):
            ns = metadata(backend).get("namespace") or ""
            by_namespace.setdefault(ns, []).append(backend)
        self._by_namespace = by_namespace
        self._fingerprint = fingerprint

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        # A few stat calls, and a parse only when a file changed: on the event loop.
        self._refresh()
        scoped = list(self._by_namespace.get(namespace, []))
        unscoped = self._by_namespace.get("", [])
        return scoped + [
            {**b, "metadata": {**metadata(b), "namespace": namespace}} for b in unscoped
        ]


class ApiBackendSource:
    """CacheBackends read live (uncached) from the API server, one LIST per call,
    within ``seconds`` (past it: ``TimeoutError``, the Pod webhook's list_error)."""

    def __init__(self, api: ApiServer, seconds: float = DEFAULT_LIST_TIMEOUT_SECONDS) -> None:
        self._api, self._seconds = api, seconds

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        status, data = await self._api.get(CACHEBACKENDS.collection(namespace), self._seconds)
        return list_items(status, data)
