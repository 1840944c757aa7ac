"""The Kubernetes client every process depends on: a small typed Protocol
(:class:`KubeClient`) and its one implementation, a dict-in, dict-out REST client
(:class:`Kube`) on top of kubernetes.client.

The generated client's model classes cost a deserialisation per object and hide
the wire form we compare against; the reconciler, the webhook's access reviews and
``icache certs`` work on plain JSON dicts, so this wraps just the verbs they use
(get/list/create/apply/replace/patch/delete/status/watch) and reuses the official
client only for authentication and connection pooling. Where the configuration comes
from (flag, in-cluster, KUBECONFIG, ~/.kube/config), the timeouts and the retries:
:mod:`kubeio.access`. Tests substitute ``tests/fakes.py``, which mypy checks
against the same Protocol.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol, Self, TypeVar
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client import rest

# The resource table is the access layer's (kubeio/resources.py); its names are
# re-exported for the callers that name resources through this module (``k.PODS``).
from kubeio.resources import BY_KIND as BY_KIND
from kubeio.resources import CACHEBACKENDS as CACHEBACKENDS
from kubeio.resources import DEPLOYMENTS as DEPLOYMENTS
from kubeio.resources import EVENTS as EVENTS
from kubeio.resources import HPAS as HPAS
from kubeio.resources import LEASES as LEASES
from kubeio.resources import MUTATING_WEBHOOK_CONFIGURATIONS as MUTATING_WEBHOOK_CONFIGURATIONS
from kubeio.resources import NETWORKPOLICIES as NETWORKPOLICIES
from kubeio.resources import PODS as PODS
from kubeio.resources import REPLICASETS as REPLICASETS
from kubeio.resources import SECRETS as SECRETS
from kubeio.resources import SERVICES as SERVICES
from kubeio.resources import STATEFULSETS as STATEFULSETS
from kubeio.resources import SUBJECT_ACCESS_REVIEWS as SUBJECT_ACCESS_REVIEWS
from kubeio.resources import VALIDATING_WEBHOOK_CONFIGURATIONS as VALIDATING_WEBHOOK_CONFIGURATIONS
from kubeio.resources import Resource as Resource
from kubeio.retries import DEFAULT_TIMEOUT_SECONDS, RETRY_POLICY, retry_after_wait
from shared.objects import meta, metadata

log = logging.getLogger(__name__)

FIELD_MANAGER = "inference-cache"


MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"

# Metadata-only reads: the API server answers with PartialObjectMetadata (apiVersion
# meta.k8s.io/v1, kind PartialObjectMetadata[List]) — each item's metadata, no spec or
# status — for every resource, built-in or custom.
METADATA_LIST_ACCEPT: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_ACCEPT: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
JSON_ACCEPT: Final = "application/json"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}: {body[:500]}")
        self.status = status
        self.reason = reason
        self.body = body

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


class KubeClient(Protocol):
    """What the reconciler, the dispatcher, the pod-events watcher, the webhook's
    access reviews and ``icache certs`` need from the API server. Objects are plain
    JSON dicts as on the wire; failures are :class:`ApiError`; ``namespace`` is None
    for cluster-scoped resources."""

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """The object; ApiError 404 when it does not exist."""

    def get_or_none(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        metadata_only: bool = False,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        """A List of the resource: one page when ``limit`` is set, metadata only when asked."""

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Create ``body``; the object as created."""

    def apply(
        self,
        res: Resource,
        namespace: str | None,
        body: dict[str, Any],
        *,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply ``body`` with our field manager; ``uid`` is a precondition."""

    def replace(
        self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace the object with ``body``; its resourceVersion is the precondition."""

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str,
    ) -> dict[str, Any]:
        """Patch the object with ``body``, sent as ``content_type``."""

    def replace_status(
        self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace the object's status subresource with ``body``."""

    def delete(
        self, res: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        """Delete the object; ``uid`` is a precondition when given."""

    def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The watch events of the resource from ``resource_version``."""


# A watch's connect budget; its read budget is the server-side timeout plus a margin.
WATCH_CONNECT_TIMEOUT_SECONDS: Final = 10.0


class Kube:
    """The :class:`KubeClient` on the wire. Thread-safe: the underlying urllib3 pool
    manager is. Build it with :func:`kubeio.access.connect`."""

    def __init__(
        self, api_client: k8s_client.ApiClient, *, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        self.api_client = api_client
        self.timeout = timeout

    @classmethod
    def from_configuration(
        cls, configuration: k8s_client.Configuration, *, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> Self:
        """A client on a loaded configuration (kubeio.access.load_configuration)."""
        return cls(k8s_client.ApiClient(configuration), timeout=timeout)

    def close(self) -> None:
        self.api_client.close()

    # ------------------------------------------------------------ raw

    def _prepare(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        content_type: str | None,
        accept: str = JSON_ACCEPT,
    ) -> tuple[str, dict[str, str], Any]:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            path = f"{path}?{urlencode({k: _q(v) for k, v in q.items()})}"
        _, url, headers, body, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return url, headers, body

    def answer(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str = JSON_ACCEPT,
    ) -> rest.RESTResponse:
        """The API server's final answer to one call, after the access layer's
        Retry-After rule, with its body unread: for a caller that reads the status and
        headers itself (doctor keeps the server's Date)."""
        url, headers, body = self._prepare(method, path, query, body, content_type, accept)
        return _final_answer(
            lambda left: self.api_client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=left
            ),
            lambda answer: answer.read(),
            replayable=method in RETRY_POLICY.idempotent_methods,
            budget=self.timeout,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str = JSON_ACCEPT,
    ) -> dict[str, Any]:
        resp = self.answer(
            method, path, query=query, body=body, content_type=content_type, accept=accept
        )
        data = resp.read() or b""
        if not 200 <= resp.status <= 299:
            text = data.decode(errors="replace")
            raise ApiError(resp.status, str(resp.reason), text)
        return json.loads(data) if data else {}

    # ------------------------------------------------------------ verbs

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return self.request("GET", res.item(namespace, name))

    def get_or_none(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.get(res, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        metadata_only: bool = False,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        """A whole list (following continue tokens); items, plus metadata.resourceVersion.

        ``metadata_only``: each item is a PartialObjectMetadata (metadata only), a
        fraction of the bytes when labels, annotations and owners are all a caller
        needs. ``resource_version="0"``: any recent version, served from the API
        server's watch cache rather than read from etcd."""
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = self.request(
                "GET",
                res.collection(namespace),
                query={
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "resourceVersion": resource_version if cont is None else None,
                    "limit": limit,
                    "continue": cont,
                },
                accept=METADATA_LIST_ACCEPT if metadata_only else JSON_ACCEPT,
            )
            items.extend(page.get("items") or [])
            cont = metadata(page).get("continue")
            if not cont:
                page["items"] = items
                return page

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", res.collection(namespace), body=body)

    def apply(
        self,
        res: Resource,
        namespace: str | None,
        body: dict[str, Any],
        *,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply with our field manager (force: we are the only writer of the
        fields we set). Fields we applied before and no longer send are removed.

        ``uid``: update exactly that object, never create one nor touch a same-named
        successor. The API server refuses the apply (404-like 409 when absent, 422
        "metadata.uid: field is immutable" when replaced); both surface as a 409
        conflict so the caller re-reads and decides again.
        """
        name = meta(body).name
        if uid:
            body = {**body, "metadata": {**metadata(body), "uid": uid}}
        try:
            return self.request(
                "PATCH",
                res.item(namespace, name),
                query={"fieldManager": FIELD_MANAGER, "force": "true"},
                body=body,
                content_type="application/apply-patch+yaml",
            )
        except ApiError as exc:
            if uid and exc.status == 422 and "metadata.uid" in exc.body:
                raise ApiError(409, "Conflict", exc.body) from exc
            raise

    def replace(
        self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        return self.request("PUT", res.item(namespace, name), body=body)

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str,
    ) -> dict[str, Any]:
        """PATCH with ``content_type`` (MERGE_PATCH, JSON_PATCH or strategic merge)."""
        return self.request(
            "PATCH", res.item(namespace, name), body=body, content_type=content_type
        )

    def replace_status(
        self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """PUT the status subresource; body carries metadata.resourceVersion, so a
        concurrent writer makes this fail with 409 (optimistic concurrency)."""
        return self.request("PUT", res.item(namespace, name) + "/status", body=body)

    def delete(
        self, res: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            # Only delete the object we looked at, not a same-named successor.
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", res.item(namespace, name), body=body)
        except ApiError as exc:
            if not exc.not_found:
                raise

    # ------------------------------------------------------------ watch

    def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Stream watch events ({"type", "object"}) from ``resource_version``.

        Ends when the server closes the stream (timeoutSeconds). An expired
        resourceVersion surfaces as ApiError(410), either as the HTTP status or as an
        ERROR event, so callers have one case to handle. BOOKMARK events (asked for)
        carry only a newer resourceVersion. ``metadata_only``: each object is a
        PartialObjectMetadata. ``namespace``: that namespace's objects only (None:
        every namespace).
        """
        url, headers, _ = self._prepare(
            "GET",
            res.collection(namespace),
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "labelSelector": label_selector,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": timeout_seconds,
            },
            None,
            None,
            METADATA_ACCEPT if metadata_only else JSON_ACCEPT,
        )
        resp = self._open_watch(url, headers, timeout_seconds)
        try:
            if resp.status != 200:
                raise ApiError(resp.status, str(resp.reason), resp.data.decode(errors="replace"))
            buffer = b""
            for chunk in resp.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            int(status.get("code") or 500),
                            str(status.get("reason")),
                            str(status.get("message")),
                        )
                    yield event
        finally:
            resp.release_conn()

    def _open_watch(
        self, url: str, headers: dict[str, str], timeout_seconds: int
    ) -> urllib3.BaseHTTPResponse:
        """The watch's streaming answer; a Retry-After answer is waited out as any
        GET's is, within the watch's connect budget."""
        pool = self.api_client.rest_client.pool_manager
        return _final_answer(
            lambda left: pool.request(
                "GET",
                url,
                headers=headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=left, read=timeout_seconds + 30.0),
            ),
            _discard,
            replayable=True,
            budget=WATCH_CONNECT_TIMEOUT_SECONDS,
        )


class _Answer(Protocol):
    @property
    def status(self) -> int:
        """The HTTP status code."""

    @property
    def headers(self) -> Any:
        """The response headers."""


_A = TypeVar("_A", bound=_Answer)


def _final_answer(
    send: Callable[[float], _A],
    discard: Callable[[_A], object],
    *,
    replayable: bool,
    budget: float,
) -> _A:
    """``send(seconds_left)``'s answer, sent again while the access layer's Retry-After
    rule (:func:`kubeio.retries.retry_after_wait`) says to. ``budget`` bounds the
    whole call, waits and resends included: each send gets what is left of it (the
    first, all of it). ``discard`` frees an answer that is not kept."""
    deadline = time.monotonic() + budget
    left = budget
    sent = 0
    while True:
        answer = send(left)
        sent += 1
        wait = retry_after_wait(
            answer.status,
            answer.headers.get("Retry-After"),
            sent=sent,
            remaining=deadline - time.monotonic(),
            replayable=replayable,
        )
        if wait is None:
            return answer
        discard(answer)
        time.sleep(wait)  # the server's Retry-After, which fits in the budget
        left = deadline - time.monotonic()
        if left <= 0:  # the sleep overran what was left: this answer stands
            return answer


def _discard(resp: urllib3.BaseHTTPResponse) -> None:
    resp.drain_conn()
    resp.release_conn()


def _q(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
