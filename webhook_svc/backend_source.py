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

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import quote

import orjson

from shared import constants as c
from webhook_svc.async_kube import AsyncKubeReader
from webhook_svc.kube_raw import RawKube


class BackendSource(Protocol):
    def list(self, namespace: str) -> list[dict[str, Any]]: ...


class AsyncBackendSource(Protocol):
    """A live source read on the event loop (webhook_svc/async_kube.py)."""

    async def list(self, namespace: str) -> list[dict[str, Any]]: ...


def backends_path(namespace: str) -> str:
    return f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{quote(namespace, safe='')}/{c.PLURAL}"


def list_items(status: int, data: bytes) -> list[dict[str, Any]]:
    """The items of a CacheBackend LIST answer, or ListFailedError."""
    if status != 200:
        raise ListFailedError(f"HTTP {status}: {data[:200]!r}")
    items: list[dict[str, Any]] = orjson.loads(data).get("items") or []
    return items


def deadline_passed(seconds: float) -> TimeoutError:
    return TimeoutError(f"no answer from the API server within {seconds:g} s")


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
        self._lock = threading.Lock()
        self._fingerprint: tuple[tuple[str, int, int], ...] | None = None
        self._by_namespace: dict[str, list[dict[str, Any]]] = {}

    def _refresh(self) -> None:
        fingerprint = _fingerprint(self._directory)
        if fingerprint == self._fingerprint:
            return
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for backend in self._loader(self._directory):
            ns = (backend.get("metadata") or {}).get("namespace") or ""
            by_namespace.setdefault(ns, []).append(backend)
        self._by_namespace = by_namespace
        self._fingerprint = fingerprint

    def list(self, namespace: str) -> list[dict[str, Any]]:
        with self._lock:
            self._refresh()
            scoped = list(self._by_namespace.get(namespace, []))
            unscoped = self._by_namespace.get("", [])
        return scoped + [
            {**b, "metadata": {**(b.get("metadata") or {}), "namespace": namespace}}
            for b in unscoped
        ]


# The Pod webhook's timeoutSeconds is 5: the lookup must give up well before the API
# server does, or the fail-open answer arrives after the API server stopped listening.
DEFAULT_LIST_TIMEOUT_SECONDS: Final = 2.0


class ListFailedError(RuntimeError):
    """The API server did not answer the CacheBackend list with 200."""


class ApiBackendSource:
    """CacheBackends read live (uncached) from the API server, one LIST per call.

    The read goes through the kubernetes client's own pool and auth, without the
    generated method (webhook_svc.kube_raw, issue 12).
    """

    def __init__(self, api_client: Any, timeout: float = DEFAULT_LIST_TIMEOUT_SECONDS) -> None:
        self._kube = RawKube(api_client)
        self._timeout = timeout

    def list(self, namespace: str) -> list[dict[str, Any]]:
        status, _, data = self._kube.request("GET", backends_path(namespace), self._timeout)
        return list_items(status, data)


class AsyncApiBackendSource:
    """The same live, uncached LIST, on the event loop (no thread), under a hard
    wall-clock deadline of ``seconds`` (``TimeoutError``, the Pod webhook's list_error)."""

    def __init__(self, reader: AsyncKubeReader, seconds: float) -> None:
        self._reader, self._seconds = reader, seconds

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        deadline = asyncio.get_running_loop().time() + self._seconds
        try:
            async with asyncio.timeout(self._seconds):
                status, data = await self._reader.get(backends_path(namespace), deadline)
        except TimeoutError:
            raise deadline_passed(self._seconds) from None
        return list_items(status, data)


class DeadlineSource:
    """``source.list`` with a hard wall-clock budget.

    A per-request socket timeout is not a budget: urllib3 retries reads, a slow-drip
    answer resets the read timeout on every chunk, and a connect can hang on DNS. The
    list runs on a small pool; past ``seconds`` the caller gets ``TimeoutError`` (the
    Pod webhook's ``list_error``) while the abandoned call ends on its own timeout. A
    call still queued when its caller gave up is cancelled, so a slow API server does
    not pile work up.
    """

    def __init__(self, source: BackendSource, seconds: float, workers: int = 8) -> None:
        self._source, self._seconds, self._workers = source, seconds, workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:  # created in the serving process, on first use
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="backend-list")
            return self._pool

    def list(self, namespace: str) -> list[dict[str, Any]]:
        future = self._executor().submit(self._source.list, namespace)
        try:
            return future.result(timeout=self._seconds)
        except FutureTimeout:
            future.cancel()
            raise deadline_passed(self._seconds) from None
