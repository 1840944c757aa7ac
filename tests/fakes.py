"""In-memory stand-ins for the Kubernetes client, for unit tests of the shells.

One place for them (issue 13 item 5). They implement just the part of
``reconciler.kube.Kube`` the code under test calls, with the API server's behaviour
that matters to it: resourceVersions move on every write, ``generateName`` gets a
name, creating an existing name is a 409.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

from reconciler import kube as k


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

    def get_or_none(self, res: k.Resource, ns: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", f"{ns}/{name}"))
        if self.fail_get:
            raise k.ApiError(503, "Unavailable")
        obj = self.objects.get((res.plural, ns, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, res: k.Resource, ns: str | None = None, **kw: Any) -> dict[str, Any]:
        if res is k.PODS and self.fail_pod_list:
            raise k.ApiError(500, "Internal", "boom")
        selector = kw.get("label_selector")
        wanted = dict(part.split("=", 1) for part in selector.split(",")) if selector else {}
        items = [
            copy.deepcopy(o)
            for (plural, o_ns, _), o in sorted(self.objects.items())
            if plural == res.plural
            and o_ns == ns
            and wanted.items() <= (o["metadata"].get("labels") or {}).items()
        ]
        return {"metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def apply(
        self, res: k.Resource, ns: str, body: dict[str, Any], *, uid: str | None = None
    ) -> dict[str, Any]:
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

    def delete(self, res: k.Resource, ns: str, name: str, **_: Any) -> None:
        self.objects.pop((res.plural, ns, name), None)
        self.writes.append(("delete", res.plural, name))

    def replace_status(
        self, res: k.Resource, ns: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        obj = self.objects[(res.plural, ns, name)]
        obj["status"] = copy.deepcopy(body["status"])
        self._bump(obj)
        self.writes.append(("status", res.plural, name))
        return copy.deepcopy(obj)

    def create(self, res: k.Resource, ns: str, body: dict[str, Any]) -> dict[str, Any]:
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

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """Only the strategic patch of an engine Deployment's pod-template annotations
        (the cache-server restart cascade)."""
        assert method == "PATCH"
        assert "/deployments/" in path
        name = path.rsplit("/", 1)[1]
        obj = self.objects.get(("deployments", "ns", name))
        if obj is None:
            raise k.ApiError(404, "NotFound")
        annotations = kw["body"]["spec"]["template"]["metadata"]["annotations"]
        tmpl = obj["spec"].setdefault("template", {}).setdefault("metadata", {})
        tmpl.setdefault("annotations", {}).update(annotations)
        self.writes.append(("patch", "deployments", name))
        return copy.deepcopy(obj)


class ScriptedWatchKube:
    """Lists and watches from scripted data, for the dispatcher's watch loop: each
    list answers resourceVersion 10 * (lists so far); the first watch of a resource
    can fail with 410 Gone (``gone_once``) to exercise the re-list; a watch yields
    one BOOKMARK at resourceVersion 99."""

    def __init__(self, items: dict[str, list[dict[str, object]]], gone_once: bool) -> None:
        self.items = items
        self.gone_once = gone_once
        self.lists: list[str] = []
        self.watches: list[tuple[str, str]] = []

    def list(self, res: k.Resource, namespace: object = None, **_: object) -> dict[str, object]:
        self.lists.append(res.plural)
        rv = str(10 * len(self.lists))
        return {"metadata": {"resourceVersion": rv}, "items": self.items.get(res.plural, [])}

    def watch(
        self, res: k.Resource, *, resource_version: str, **_: object
    ) -> Iterator[dict[str, object]]:
        self.watches.append((res.plural, resource_version))
        if self.gone_once:
            self.gone_once = False
            raise k.ApiError(410, "Expired", "too old resource version")
        yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}
        time.sleep(0.05)
