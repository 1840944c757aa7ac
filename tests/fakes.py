"""In-memory stand-ins for the Kubernetes client, for unit tests of the shells.

One place for them, so every shell test fakes the same API server. They implement the
:class:`kubeio.client.KubeClient` Protocol the reconciler, dispatcher, pod-events
watcher, webhook and ``icache certs`` depend on (mypy checks it: see the assignments
at the bottom), with the API server's behaviour that matters to the code under test:
resourceVersions move on every write, ``generateName`` gets a name, creating an
existing name is a 409.

Below them, the read-back of a real :class:`reconciler.queue.workqueue.WorkQueue`'s Redis
state (``queue_state``, ``queue_failures``, ``clear_queue``): the queue itself has
no use for them, the tests do; and ``held``, a byte budget of the webhook held for
a block; and ``mutate_pod``, the Pod route's one function run over a scripted
CacheBackend lister.

``FakeAccessReviewer`` answers the webhook's SubjectAccessReviews.

For the client code itself: ``GapKube``, the real client with a dropped watch and a
held reconnect; and two scripted HTTP/1.1 API servers on 127.0.0.1 that answer as a
test says, ``ScriptedHttpServer`` (threaded, for the synchronous ``Kube``) and
``AsyncScriptedServer`` (asyncio, for the webhook's ``ApiServer``, which ``api_for``
connects to it).
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlparse

from kubernetes import client

from kubeio import access as kubeaccess
from kubeio import client as k
from kubeio.async_client import ApiServer
from reconciler.queue.workqueue import WorkQueue
from reconciler.status.cascade import CASCADE_WINDOW_SECONDS
from reconciler.status.observed import ProbeObservation
from reconciler.steps.engine_cascade import CascadeClaim
from reconciler.steps.reconcile import (
    PROBE_WINDOW_SECONDS,
    ProbeRateLimiter,
    Reconciler,
)
from webhook_svc import pod_admission
from webhook_svc.admission_review import AdmissionRequest
from webhook_svc.http.admission_gate import ByteBudget
from webhook_svc.http.executors import in_place
from webhook_svc.workload_authz import ReviewError


def fields_match(selector: str | None, obj: dict[str, Any]) -> bool:
    """The field-selector form the code under test sends: ``a.b=v``, comma-joined."""
    for part in (selector or "").split(","):
        if not part:
            continue
        path, _, want = part.partition("=")
        value: Any = obj
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if str(value) != want:
            return False
    return True


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """The label-selector forms the code under test sends: ``k=v``, ``k`` (exists) and
    ``k in (a,b)``, comma-joined (commas inside a set are the set's)."""
    if not selector:
        return True
    parts, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    for part in (p.strip() for p in parts):
        if " in (" in part:
            key, _, values = part.partition(" in (")
            if labels.get(key.strip()) not in values.rstrip(")").split(","):
                return False
        elif "=" in part:
            key, _, value = part.partition("=")
            if labels.get(key) != value:
                return False
        elif part not in labels:
            return False
    return True


class FakeKube:
    """Objects by (plural, namespace, name); server-side apply as a replace; a log of
    writes (``writes``: (verb, plural, name), Events as (``create``, ``events``,
    reason)) and of reads and creates (``calls``: (``get``, ns/name), (``create``,
    name)). ``fail_get`` / ``fail_pod_list`` make those calls fail as a broken API
    server would."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.calls: list[tuple[str, str]] = []
        self.fail_pod_list = False
        self.fail_get = False
        self.rv = 0
        self._generated = 0

    def put(self, plural: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[(plural, meta["namespace"], meta["name"])] = obj

    def put_backend(self, key: str, uid: str) -> None:
        """A bare CacheBackend ``namespace/name`` with ``uid`` (for UID checks)."""
        ns, name = key.split("/", 1)
        self.put("cachebackends", {"metadata": {"name": name, "namespace": ns, "uid": uid}})

    @property
    def events(self) -> dict[str, dict[str, Any]]:
        """Events created, by name."""
        return {name: o for (plural, _, name), o in self.objects.items() if plural == "events"}

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def get(self, res: k.Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.get_or_none(res, namespace, name)
        if obj is None:
            raise k.ApiError(404, "NotFound")
        return obj

    def get_or_none(
        self, res: k.Resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        self.calls.append(("get", f"{namespace}/{name}"))
        if self.fail_get:
            raise k.ApiError(503, "Unavailable")
        obj = self.objects.get((res.plural, namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        res: k.Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        metadata_only: bool = False,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        ns = namespace
        if res is k.PODS and self.fail_pod_list:
            raise k.ApiError(500, "Internal", "boom")
        items = [
            copy.deepcopy(o)
            for (plural, o_ns, _), o in sorted(self.objects.items())
            if plural == res.plural
            and (ns is None or o_ns == ns)
            and selector_matches(label_selector, o["metadata"].get("labels") or {})
            and fields_match(field_selector, o)
        ]
        return {"metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def apply(
        self,
        res: k.Resource,
        namespace: str | None,
        body: dict[str, Any],
        *,
        uid: str | None = None,
    ) -> dict[str, Any]:
        ns = namespace or ""
        live = self.objects.get((res.plural, ns, body["metadata"]["name"]))
        if uid is not None and (live is None or live["metadata"].get("uid") != uid):
            raise k.ApiError(409, "Conflict", "uid precondition")
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = ns
        obj["metadata"].setdefault("uid", f"uid-{body['metadata']['name']}")
        obj["metadata"]["generation"] = 1
        self._bump(obj)
        self.put(res.plural, obj)
        self.writes.append(("apply", res.plural, body["metadata"]["name"]))
        return copy.deepcopy(obj)

    def delete(
        self, res: k.Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        self.objects.pop((res.plural, namespace or "", name), None)
        self.writes.append(("delete", res.plural, name))

    def replace(
        self, res: k.Resource, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """PUT with optimistic concurrency, as the API server does it."""
        key = (res.plural, namespace or "", name)
        live = self.objects.get(key)
        if live is None:
            raise k.ApiError(404, "NotFound")
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent and sent != live["metadata"].get("resourceVersion"):
            raise k.ApiError(409, "Conflict", "the object has been modified")
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = namespace or ""
        self._bump(obj)
        self.objects[key] = obj
        self.writes.append(("replace", res.plural, name))
        return copy.deepcopy(obj)

    def replace_status(
        self, res: k.Resource, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        obj = self.objects[(res.plural, namespace or "", name)]
        obj["status"] = copy.deepcopy(body["status"])
        self._bump(obj)
        self.writes.append(("status", res.plural, name))
        return copy.deepcopy(obj)

    def create(
        self, res: k.Resource, namespace: str | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        ns = namespace or ""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            self._generated += 1
            meta["name"] = f"{meta.get('generateName', '')}{self._generated:05d}"
        name = meta["name"]
        self.calls.append(("create", name))
        self.writes.append(("create", res.plural, str(body.get("reason"))))
        if (res.plural, ns, name) in self.objects:
            raise k.ApiError(409, "AlreadyExists")
        meta["namespace"] = ns
        self._bump(obj)
        self.put(res.plural, obj)
        return copy.deepcopy(obj)

    def patch(
        self,
        res: k.Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str,
    ) -> dict[str, Any]:
        """The merge patch of an engine Deployment's pod-template annotations (the
        cache-server restart cascade), and the JSON patch (uid test, spec replace) of
        an exact spec repair."""
        if content_type == k.JSON_PATCH:
            return self._json_patch_spec(res, namespace, name, body)
        assert res is k.DEPLOYMENTS
        assert content_type == k.MERGE_PATCH
        obj = self.objects.get(("deployments", namespace or "", name))
        if obj is None:
            raise k.ApiError(404, "NotFound")
        annotations = body["spec"]["template"]["metadata"]["annotations"]
        tmpl = obj["spec"].setdefault("template", {}).setdefault("metadata", {})
        tmpl.setdefault("annotations", {}).update(annotations)
        self.writes.append(("patch", "deployments", name))
        return copy.deepcopy(obj)

    def _json_patch_spec(
        self, res: k.Resource, namespace: str | None, name: str, ops: Any
    ) -> dict[str, Any]:
        obj = self.objects.get((res.plural, namespace or "", name))
        if obj is None:
            raise k.ApiError(404, "NotFound")
        for op in ops:
            if op["op"] == "test" and op["path"] == "/metadata/uid":
                if obj["metadata"].get("uid") != op["value"]:
                    raise k.ApiError(422, "Invalid", "test operation failed")
            else:
                assert (op["op"], op["path"]) == ("replace", "/spec"), op
                obj["spec"] = copy.deepcopy(op["value"])
        self._bump(obj)
        self.writes.append(("patch", res.plural, name))
        return copy.deepcopy(obj)

    def watch(
        self,
        res: k.Resource,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """No changes: the stream ends soon, as a server-side timeout would."""
        time.sleep(0.05)
        return iter(())


def fake_cluster(*objects: tuple[str, dict[str, Any]]) -> FakeKube:
    """A FakeKube holding ``objects``, each given with its plural."""
    kube = FakeKube()
    for plural, obj in objects:
        kube.put(plural, obj)
    return kube


class ScriptedWatchKube(FakeKube):
    """Lists and watches from scripted data, for the dispatcher's watch loop: each
    list answers resourceVersion 10 * (lists so far); the first watch of a resource
    can fail with 410 Gone (``gone_once``) to exercise the re-list; a watch yields
    one BOOKMARK at resourceVersion 99. Everything else is FakeKube's."""

    def __init__(self, items: dict[str, list[dict[str, Any]]], gone_once: bool) -> None:
        super().__init__()
        self.items = items
        self.gone_once = gone_once
        self.lists: list[str] = []
        self.watches: list[tuple[str, str]] = []

    def list(
        self,
        res: k.Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        metadata_only: bool = False,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        self.lists.append(res.plural)
        rv = str(10 * len(self.lists))
        return {"metadata": {"resourceVersion": rv}, "items": self.items.get(res.plural, [])}

    def watch(
        self,
        res: k.Resource,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        self.watches.append((res.plural, resource_version))
        if self.gone_once:
            self.gone_once = False
            raise k.ApiError(410, "Expired", "too old resource version")
        yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}
        time.sleep(0.05)


class ScriptedKube(FakeKube):
    """Lists and watch streams from a script: ``lists`` answered in turn; each watch
    call takes the next entry of ``watches`` — a list of events, or an exception."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        super().__init__()
        self.lists = lists
        self.watches = watches
        self.list_calls: list[dict[str, Any]] = []
        self.watch_calls: list[dict[str, Any]] = []
        self.done = threading.Event()

    def list(
        self,
        res: k.Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        metadata_only: bool = False,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        self.list_calls.append(
            {"selector": label_selector, "limit": limit, "metadata_only": metadata_only}
        )
        items = self.lists.pop(0) if self.lists else []
        rv = str(100 * len(self.list_calls))
        return {"metadata": {"resourceVersion": rv}, "items": items}

    def watch(
        self,
        res: k.Resource,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        self.watch_calls.append({"rv": resource_version, "metadata_only": metadata_only})
        if not self.watches:
            self.done.set()
            time.sleep(0.05)
            return
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step


class FailingEvents(FakeKube):
    """FakeKube whose Event writes the API server refuses (403)."""

    def create(
        self, res: k.Resource, namespace: str | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        if res is k.EVENTS:
            self.writes.append(("create-failed", res.plural, str(body.get("reason"))))
            raise k.ApiError(403, "Forbidden", "events is forbidden")
        return super().create(res, namespace, body)


class GapKube(k.Kube):
    """The real client with a fault: ``drop()`` breaks the open watch at its next event
    (that event is lost) and holds every reconnect until ``resume()``, which resumes
    from resourceVersion 1 (compacted away by the test, so the API server answers 410
    Gone)."""

    def __init__(self, kube: k.Kube) -> None:
        super().__init__(kube.api_client)
        self._dropping = threading.Event()
        self._resumed = threading.Event()
        self._resumed.set()
        self.dropped = threading.Event()

    def drop(self) -> None:
        self._resumed.clear()
        self._dropping.set()

    def resume(self) -> None:
        self._resumed.set()

    def watch(
        self, res: k.Resource, *, resource_version: str, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        if not self._resumed.is_set():
            self._resumed.wait(60)
            resource_version = "1"
        for event in super().watch(res, resource_version=resource_version, **kwargs):
            if self._dropping.is_set():
                self._dropping.clear()
                self.dropped.set()
                raise ConnectionResetError("the watch connection dropped")
            yield event


class FakeAccessReviewer:
    """A SubjectAccessReview client that allows the resources in ``allowed`` (every
    review it is asked is kept in ``asked``); ``error``: each review fails."""

    def __init__(self, allowed: set[str] | None = None, error: bool = False) -> None:
        self.allowed = allowed or set()
        self.error = error
        self.asked: list[dict[str, Any]] = []

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body)
        if self.error:
            raise ReviewError("API server said 503 Service Unavailable")
        resource = body["spec"]["resourceAttributes"]["resource"]
        return {"status": {"allowed": resource in self.allowed}}


# --------------------------------------------------- scripted API servers on 127.0.0.1

# Answers one request by its number (1 for the first): (status, headers, body).
Script = Callable[[int], tuple[int, dict[str, str], bytes]]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log each request to stderr (the test output
    stays the test's)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Ignored: requests are not logged."""


def raise_unexpected(*_args: Any, **_kwargs: Any) -> NoReturn:
    """A stand-in for any callable that fails in a way nobody planned for."""
    raise RuntimeError("unexpected")


class ScriptedHttpServer:
    """A threaded HTTP/1.1 server answering each request as ``script`` says; it counts
    the requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with outer._lock:
                    outer.requests.append(f"{self.command} {self.path}")
                    number = len(outer.requests)
                status, headers, body = outer.script(number)
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@dataclass
class Request:
    connection: int  # 0 for the server's first connection, 1 for the next, ...
    line: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


# Answers one request: writes (some of) an answer and says whether to keep reading on
# this connection (False: the server closes it).
Respond = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]


class AsyncScriptedServer:
    """A scripted HTTP/1.1 server: ``respond`` answers each request."""

    def __init__(self, respond: Respond, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.tls = tls
        self.requests: list[Request] = []
        self.connections = 0
        self.client_closed: list[asyncio.Event] = []  # per connection: EOF from the client
        self._writers: list[asyncio.StreamWriter] = []
        self._handlers: list[asyncio.Task[Any]] = []

    async def __aenter__(self) -> AsyncScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.server.close()
        for writer in self._writers:
            writer.close()  # each handler then sees EOF and ends
        await asyncio.wait_for(asyncio.gather(*self._handlers), 5)
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self.connections
        self.connections += 1
        self.client_closed.append(asyncio.Event())
        self._writers.append(writer)
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.append(handler)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.client_closed[connection].set()
                    return
                line, *fields = head.decode("latin-1").split("\r\n")[:-2]
                headers = [(k.strip(), v.strip()) for k, _, v in (f.partition(":") for f in fields)]
                request = Request(connection, line, headers)
                length = request.header("content-length")
                if length:
                    request.body = await reader.readexactly(int(length[0]))
                self.requests.append(request)
                if not await self.respond(request, writer):
                    return
                await writer.drain()
        finally:
            writer.close()

    def configuration(self, scheme: str = "http", **settings: Any) -> client.Configuration:
        """A real kubernetes client configuration for this server, bearer token t0k."""
        configuration = client.Configuration()
        configuration.host = f"{scheme}://127.0.0.1:{self.port}"
        configuration.api_key = {"authorization": "t0k"}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        for name, value in settings.items():
            setattr(configuration, name, value)
        return configuration

    def api(self, scheme: str = "http", **settings: Any) -> ApiServer:
        return api_for(self.configuration(scheme, **settings))


def api_for(configuration: client.Configuration) -> ApiServer:
    loaded = kubeaccess.Loaded(configuration, "test")
    return ApiServer(lambda: kubeaccess.async_client_for(loaded))


class FakeIndexServer:
    """The cache-index server as reconciler/steps/server_client.py's client sees it: /probe
    answers ``outcome`` (each call recorded in ``calls``), /snapshot lists
    ``replicas``."""

    def __init__(self, outcome: str = "ok", replicas: list[dict[str, Any]] | None = None) -> None:
        self.outcome = outcome
        self.replicas = replicas or []
        self.calls: list[dict[str, Any]] = []

    def probe(
        self, backend: str, model: str, hash_scheme: str, backend_type: str | None
    ) -> ProbeObservation:
        self.calls.append(
            {
                "backend": backend,
                "model": model,
                "hash_scheme": hash_scheme,
                "backend_type": backend_type,
            }
        )
        return ProbeObservation(self.outcome)

    def snapshot(self) -> dict[str, Any]:
        return {"replicas": self.replicas}


# ------------------------------------------------------- a real WorkQueue, read back


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def queue_state(queue: WorkQueue) -> dict[str, Any]:
    """Everything a WorkQueue holds in Redis: pending and queued keys with their due
    times, the processing keys with their lease tokens, the dirty keys and the failure
    counts."""
    redis = queue.redis

    def scores(zset: str) -> dict[str, float]:
        rows: list[Any] = list(redis.zrange(zset, 0, -1, withscores=True))
        return {_text(row[0]): float(row[1]) for row in rows}

    return {
        "pending": scores(queue.k_pending),
        "queued": scores(queue.k_queued),
        "processing": {_text(k_): _text(v) for k_, v in redis.hgetall(queue.k_processing).items()},
        "dirty": {_text(k_) for k_ in redis.smembers(queue.k_dirty)},
        "failures": {_text(k_): int(v) for k_, v in redis.hgetall(queue.k_failures).items()},
    }


def queue_failures(queue: WorkQueue, key: str) -> int:
    """How many runs of ``key`` in a row have failed (its backoff exponent)."""
    return int(queue.redis.hget(queue.k_failures, key) or 0)


def clear_queue(queue: WorkQueue) -> None:
    """Delete every Redis key of the queue (its prefix), so tests sharing one server
    leave nothing behind."""
    queue.redis.delete(
        queue.k_pending,
        queue.k_queued,
        queue.k_processing,
        queue.k_leases,
        queue.k_dirty,
        queue.k_failures,
        queue.k_wake,
        queue.k_epoch,
    )
    for fences in queue.redis.scan_iter(match=queue.k_fences("*")):
        queue.redis.delete(fences)


# --------------------------------------------------- the webhook's byte budget, held


@asynccontextmanager
async def held(budget: ByteBudget, size: int, wait_seconds: float) -> AsyncIterator[None]:
    """Hold ``size`` bytes of ``budget`` for the block (acquire, then release), as the
    admission gate does around a request; OverloadedError as acquire raises it."""
    granted = await budget.acquire(size, wait_seconds)
    try:
        yield
    finally:
        budget.release(granted)


# ------------------------------------------------------------- the Pod route, driven


def mutate_pod(
    req: AdmissionRequest,
    list_backends: Callable[[str], list[dict[str, Any]]],
    ctx: Any,
) -> tuple[dict[str, Any], str, str]:
    """The Pod route's one function (``pod_admission.admit_pod``), run in place, with
    ``list_backends`` standing in for the live CacheBackend LIST (an exception it
    raises is what the route's lister would raise)."""

    async def listed(namespace: str) -> list[dict[str, Any]]:
        return list_backends(namespace)

    return asyncio.run(pod_admission.admit_pod(req, listed, ctx, in_place))


# mypy holds the fakes to the Protocol the production code depends on.
_fake: k.KubeClient = FakeKube()
_scripted: k.KubeClient = ScriptedWatchKube({}, gone_once=False)


class InProcessCascadeLimiter:
    """The cascade limiter's rule (one engine cascade per backend per window; the same
    value again within it is already done) in one process's memory: production shares
    it across workers in Redis (reconciler/work/rate_limits.py)."""

    def __init__(self, window: float = CASCADE_WINDOW_SECONDS) -> None:
        self.window = window
        self._lock = threading.Lock()
        self._claims: dict[str, tuple[float, str]] = {}

    def claim(self, key: str, value: str) -> CascadeClaim:
        now = time.monotonic()
        with self._lock:
            prev = self._claims.get(key)
            if prev is not None and now - prev[0] < self.window:
                if prev[1] == value:
                    return "done", 0.0
                return "wait", self.window - (now - prev[0])
            self._claims[key] = (now, value)
            return "go", 0.0

    def release(self, key: str) -> None:
        with self._lock:
            self._claims.pop(key, None)


def in_process_rate_limiter(window: float = PROBE_WINDOW_SECONDS) -> ProbeRateLimiter:
    """At most one /probe per backend per window, in one process's memory (production:
    reconciler/work/rate_limits.py, in Redis)."""
    last: dict[str, float] = {}

    def limiter(key: str) -> float | None:
        now = time.monotonic()
        prev = last.get(key)
        if prev is not None and now - prev < window:
            return window - (now - prev)
        last[key] = now
        return None

    return limiter


def in_process_reconciler(kube: k.KubeClient, **options: Any) -> Reconciler:
    """A Reconciler with in-process rate limiters unless ``options`` name others."""
    options.setdefault(
        "probe_rate_limiter",
        in_process_rate_limiter(options.get("probe_window", PROBE_WINDOW_SECONDS)),
    )
    options.setdefault("cascade_limiter", InProcessCascadeLimiter())
    return Reconciler(kube, **options)


# --------------------------------------------------------------- Prometheus query API


class _PrometheusHandler(QuietHandler):
    server: FakePrometheus

    def do_GET(self) -> None:
        url = urlparse(self.path)
        self.server.seen.append(url.path)
        promql = parse_qs(url.query).get("query", [""])[0]
        if url.path != "/api/v1/query" or promql not in self.server.answers:
            body: dict[str, Any] = {"status": "error", "errorType": "bad_data", "error": promql}
            status = 400
        else:
            body, status = self.server.answers[promql], 200
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class FakePrometheus(ThreadingHTTPServer):
    """A Prometheus HTTP API on 127.0.0.1 that answers instant queries
    (``GET /api/v1/query``) from ``answers`` (PromQL -> the JSON Prometheus would send)
    and 400 ``bad_data`` for anything else, recording the paths asked for in ``seen``.
    Use as a context manager; ``url`` is its base URL."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _PrometheusHandler)
        self.answers: dict[str, dict[str, Any]] = {}
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


def prometheus_vector(*samples: tuple[str, str, str]) -> dict[str, Any]:
    """An instant-query answer: (namespace, cachebackend, value) samples."""
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"namespace": ns, "cachebackend": cb}, "value": [1.7e9, value]}
                for ns, cb, value in samples
            ],
        },
    }
