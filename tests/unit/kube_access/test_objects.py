"""shared/objects.py: typed read access to an object's metadata, total over any input."""

from __future__ import annotations

from typing import Any

import pytest

from shared.objects import meta, metadata


def test_meta_reads_what_the_object_says() -> None:
    obj: dict[str, Any] = {
        "metadata": {
            "name": "cb",
            "generateName": "cb-",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"a": "b"},
            "annotations": {"c": "d"},
            "ownerReferences": [{"kind": "CacheBackend", "name": "x"}, "junk"],
        }
    }
    view = meta(obj)
    assert (view.name, view.generate_name, view.namespace, view.uid) == ("cb", "cb-", "ns", "u1")
    assert (view.resource_version, view.deletion_timestamp) == ("7", "2026-01-01T00:00:00Z")
    assert view.labels == {"a": "b"}
    assert view.annotations == {"c": "d"}
    assert view.owner_references == [{"kind": "CacheBackend", "name": "x"}]


@pytest.mark.parametrize(
    "obj",
    [None, {}, {"metadata": None}, {"metadata": []}, {"metadata": {"labels": ["x"]}}],
)
def test_a_missing_or_malformed_metadata_reads_as_empty(obj: Any) -> None:
    view = meta(obj)
    assert (view.name, view.namespace, view.uid, view.resource_version) == ("", "", "", "")
    assert view.labels == {}
    assert view.annotations == {}
    assert view.owner_references == []


def test_metadata_is_the_objects_own_dict_so_writes_reach_it() -> None:
    obj: dict[str, Any] = {"metadata": {"labels": {}}}
    metadata(obj)["name"] = "x"
    meta(obj).labels["k"] = "v"
    assert obj["metadata"] == {"name": "x", "labels": {"k": "v"}}
