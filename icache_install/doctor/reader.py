"""The doctor's only way to the API server: GET requests, never a write.

Every read is scoped to what a check needs: single GETs by name for the install, the
CacheBackends of the namespace asked for (or all), and engine pods as metadata only
(``PartialObjectMetadataList``: labels, annotations, owner and creation time are all
the pod checks read), paged. A Secret whose content no check reads (the Redis
password) is read as metadata only too. The clock is the API server's (the ``Date``
of its answers), so a laptop's skew does not make a Lease look stale.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

from kubeio import client as kc
from kubeio.client import Kube, Resource
from shared.objects import metadata

CRDS: Final = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
PAGE: Final = 500


@dataclass(frozen=True)
class ReadError(Exception):
    """A read that failed for another reason than NotFound."""

    what: str
    status: int
    reason: str

    def __str__(self) -> str:
        return f"cannot read {self.what}: {self.status} {self.reason}"

    @property
    def forbidden(self) -> bool:
        return self.status in (401, 403)


class ClusterReader:
    """GETs only (the class has no other verb), counted for tests and benchmarks."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.requests = 0
        self._server_now: dt.datetime | None = None

    @property
    def server(self) -> str:
        return str(self._kube.api_client.configuration.host)

    def now(self) -> dt.datetime:
        """The API server's time at its last answer (our clock before the first)."""
        return self._server_now or dt.datetime.now(dt.UTC)

    def _get(
        self,
        path: str,
        what: str,
        query: dict[str, Any] | None = None,
        accept: str = "application/json",
    ) -> dict[str, Any] | None:
        full = f"{path}?{urlencode(query)}" if query else path
        self.requests += 1
        # Through the access layer's Retry-After rule, like every other read.
        resp = self._kube.answer("GET", full, accept=accept)
        data = resp.read() or b""
        date = resp.headers.get("Date")
        if date:
            with contextlib.suppress(TypeError, ValueError):
                self._server_now = email.utils.parsedate_to_datetime(date).astimezone(dt.UTC)
        if resp.status == 404:
            return None
        if not 200 <= resp.status <= 299:
            raise ReadError(what, resp.status, str(resp.reason))
        out: dict[str, Any] = json.loads(data) if data else {}
        return out

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        what = f"{res.kind} {namespace + '/' if namespace else ''}{name}"
        return self._get(res.item(namespace, name), what)

    def exists(self, res: Resource, namespace: str | None, name: str) -> bool:
        """Whether the object exists, reading its metadata only."""
        what = f"{res.kind} {namespace + '/' if namespace else ''}{name}"
        return self._get(res.item(namespace, name), what, accept=kc.METADATA_ACCEPT) is not None

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        metadata_only: bool = False,
    ) -> list[dict[str, Any]]:
        what = f"{res.kind} list{' in ' + namespace if namespace else ''}"
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            query = {"limit": PAGE, "labelSelector": label_selector, "continue": cont}
            page = self._get(
                res.collection(namespace),
                what,
                {k: v for k, v in query.items() if v is not None},
                kc.METADATA_LIST_ACCEPT if metadata_only else kc.JSON_ACCEPT,
            )
            if page is None:  # the resource is not served (the CRD is missing)
                return items
            items.extend(page.get("items") or [])
            cont = metadata(page).get("continue")
            if not cont:
                return items


__all__ = ["CRDS", "ClusterReader", "ReadError", "kc"]
