"""`icache doctor`'s engine-version listing and its skew finding (docs/doctor.md,
"Engine versions"): pure checks over a backend and its pods, read in full."""

from __future__ import annotations

import json
from typing import Any

import pytest

from icache_install.doctor.findings import CODES, Severity
from icache_install.doctor.versions import check_versions, wants_versions
from shared import constants as c
from tests.builders import UID, backend, managed

CHECK = "lmcache-kernel-check"


def engine(
    name: str,
    cb: dict[str, Any],
    versions: dict[str, str] | None = None,
    *,
    finished: bool = True,
    uid: str | None = None,
    check: bool = True,
) -> dict[str, Any]:
    """An engine pod the webhook wired to ``cb``, its kernel check finished with a verdict
    reporting ``versions`` (None: a verdict from before the field)."""
    meta = cb["metadata"]
    annotations = {
        c.ANNOTATION_INJECTED_BY: f"{meta['namespace']}/{meta['name']}",
        c.ANNOTATION_INJECTED_BY_UID: uid or meta["uid"],
    }
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": meta["namespace"], "annotations": annotations},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
        "status": {},
    }
    if not check:
        return pod
    annotations[c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE] = "report-only"
    pod["spec"]["initContainers"] = [{"name": CHECK, "image": "vllm/vllm-openai:v0.11.0"}]
    if finished:
        body: dict[str, Any] = {"mode": "report-only", "result": "ok", "error": ""}
        if versions is not None:
            body["versions"] = versions
        pod["status"]["initContainerStatuses"] = [
            {"name": CHECK, "state": {"terminated": {"exitCode": 0, "message": json.dumps(body)}}}
        ]
    return pod


def lmcache_backend(image: str | None = None) -> dict[str, Any]:
    remote = managed(lmCacheServer={"image": image}) if image else managed()
    return backend(remote=remote)


def codes(found: list[Any]) -> list[str]:
    return [f.code for f in found]


def test_lists_every_pods_versions_and_the_servers() -> None:
    cb = lmcache_backend()
    pods = [
        engine("e-b", cb, {"lmcache": "0.4.7", "vllm": "0.11.0", "torch": "2.8.0"}),
        engine("e-a", cb, {"vllm": "0.11.0"}),
        engine("e-c", cb, None),
        engine("e-d", cb, finished=False),
    ]
    found = check_versions(cb, pods)
    assert codes(found) == ["backend.EngineVersions"]
    listing = found[0]
    assert listing.severity == Severity.INFO
    assert listing.message == (
        "engine pods: e-a: vllm 0.11.0; e-b: lmcache 0.4.7, vllm 0.11.0, torch 2.8.0; "
        "e-c: not reported; e-d: kernel check not finished; "
        "LMCache server lmcache/standalone:v0.4.7: lmcache 0.4.7"
    )
    assert listing.details["server"] == {"image": "lmcache/standalone:v0.4.7", "version": "0.4.7"}
    assert listing.details["pods"][1] == {
        "name": "e-b",
        "finished": True,
        "versions": {"lmcache": "0.4.7", "vllm": "0.11.0", "torch": "2.8.0"},
    }


def test_a_skewed_client_is_a_warning_naming_the_pod_and_the_server() -> None:
    cb = lmcache_backend()
    pods = [engine("e-ok", cb, {"lmcache": "0.4.2"}), engine("e-new", cb, {"lmcache": "0.5.6"})]
    found = check_versions(cb, pods)
    assert codes(found) == ["backend.EngineVersions", "backend.ClientServerSkew"]
    skew = found[1]
    assert skew.severity == CODES["backend.ClientServerSkew"][0] == Severity.WARNING
    assert "e-new (lmcache 0.5.6)" in skew.message
    assert "e-ok" not in skew.message
    assert "0.4.7" in skew.message
    assert skew.details["skewed"] == {"e-new": "0.5.6"}


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("lmcache/standalone@sha256:" + "c" * 64, "digest"),
        ("lmcache/standalone:latest", "not a release"),
    ],
)
def test_an_unknown_server_version_is_said_and_never_compared(image: str, why: str) -> None:
    cb = lmcache_backend(image)
    found = check_versions(cb, [engine("e", cb, {"lmcache": "0.5.6"})])
    assert codes(found) == ["backend.EngineVersions"]
    assert "version unknown" in found[0].message
    assert why in found[0].message
    assert found[0].details["server"] == {"image": image, "version": None}


def test_host_only_lists_the_clients_without_a_server() -> None:
    cb = backend()
    found = check_versions(cb, [engine("e", cb, {"lmcache": "0.5.6"})])
    assert codes(found) == ["backend.EngineVersions"]
    assert "server" not in found[0].message
    assert found[0].details["server"] is None


def test_only_this_backends_checked_pods_count() -> None:
    cb = lmcache_backend()
    others = [
        engine("stale", cb, {"lmcache": "0.5.6"}, uid="0000-old"),
        engine("unchecked", cb, check=False),
    ]
    assert not wants_versions(cb, others)
    assert check_versions(cb, others) == []
    assert wants_versions(cb, [*others, engine("e", cb, finished=False)])
    assert cb["metadata"]["uid"] == UID
