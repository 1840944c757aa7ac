"""Embedded mode's FileBackendSource: namespaces, reloads, other kinds ignored."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path
from typing import Any

from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource

BACKEND = """
apiVersion: inferencecache.io/v1alpha1
kind: CacheBackend
metadata:
  name: {name}
{ns}spec:
  runtime: VLLM
  engineSelector:
    matchLabels:
      app: {name}
status:
  endpoint: svc:1
"""


def listed(source: FileBackendSource, namespace: str) -> list[dict[str, Any]]:
    return asyncio.run(source.list(namespace))


def _source(directory: Path) -> FileBackendSource:
    return FileBackendSource(directory, functools.partial(load_backends, default_namespace=""))


def test_namespaced_backend_is_seen_only_in_its_namespace(tmp_path: Path) -> None:
    """Spec "Selection": CacheBackends of the pod's namespace only."""
    (tmp_path / "a.yaml").write_text(BACKEND.format(name="a", ns="  namespace: team-a\n"))
    source = _source(tmp_path)
    assert [b["metadata"]["name"] for b in listed(source, "team-a")] == ["a"]
    assert listed(source, "team-b") == []


def test_namespace_less_backend_joins_the_asking_namespace(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(BACKEND.format(name="b", ns=""))
    source = _source(tmp_path)
    (got,) = listed(source, "prod")
    assert got["metadata"]["namespace"] == "prod"
    assert got["status"] == {"endpoint": "svc:1"}  # status honoured
    assert listed(source, "dev")[0]["metadata"]["namespace"] == "dev"


def test_other_kinds_are_ignored_and_edits_are_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        BACKEND.format(name="c", ns="")
        + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    )
    source = _source(tmp_path)
    assert [b["metadata"]["name"] for b in listed(source, "default")] == ["c"]
    path.write_text(BACKEND.format(name="d", ns=""))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert [b["metadata"]["name"] for b in listed(source, "default")] == ["d"]
