"""Server-side apply of arbitrary manifests (any kind, dict in, dict out) for tests.

What ``kubectl apply --server-side [--dry-run=server]`` does: discovery maps a kind
to its REST path, then one PATCH with ``application/apply-patch+yaml`` and strict
field validation (an unknown or misspelt field is an error, not a warning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kubeio.client import Kube

FIELD_MANAGER = "icache-install-test"


@dataclass(frozen=True)
class ApiResource:
    group_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.plural} {name} has no namespace")
            return f"{base}/namespaces/{namespace}/{self.plural}/{name}"
        return f"{base}/{self.plural}/{name}"


class Applier:
    def __init__(self, api: client.ApiClient) -> None:
        self.kube = Kube(api)
        self._discovered: dict[str, dict[str, ApiResource]] = {}

    def resource(self, api_version: str, kind: str) -> ApiResource:
        if api_version not in self._discovered:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.kube.request("GET", base)
            self._discovered[api_version] = {
                r["kind"]: ApiResource(api_version, r["name"], bool(r["namespaced"]))
                for r in listing["resources"]
                if "/" not in r["name"]
            }
        try:
            return self._discovered[api_version][kind]
        except KeyError:
            raise LookupError(f"the API server does not serve {kind} in {api_version}") from None

    def apply(self, doc: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        meta = doc["metadata"]
        path = self.resource(doc["apiVersion"], doc["kind"]).path(
            meta.get("namespace"), meta["name"]
        )
        query = {"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            query["dryRun"] = "All"
        return self.kube.request(
            "PATCH", path, query=query, body=doc, content_type="application/apply-patch+yaml"
        )

    def create(self, doc: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        meta = doc["metadata"]
        resource = self.resource(doc["apiVersion"], doc["kind"])
        path = resource.path(meta.get("namespace"), meta["name"]).rsplit("/", 1)[0]
        query = {"fieldValidation": "Strict", "dryRun": "All" if dry_run else None}
        return self.kube.request("POST", path, query=query, body=doc)


def kind_and_name(doc: dict[str, Any]) -> str:
    """``Kind/name`` of a manifest, as kubectl names an object."""
    return f"{doc['kind']}/{doc['metadata']['name']}"
