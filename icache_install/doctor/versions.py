"""Per-CacheBackend engine versions: what each injected engine pod's kernel check reported
(lmcache, vllm, torch installed in its image) beside the LMCache server's version (the
tag of the image a Managed LMCacheServer backend provisions), and a finding when a client
differs from the server in major.minor. Pure functions of the backend and its pods,
read in full (the verdict is in the pod's status); the rules are the worker's
(shared/client_versions.py), so doctor and the LMCacheVersionSkew condition agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from icache_install.doctor.backends import ref_of
from icache_install.doctor.findings import Finding, finding
from shared import client_versions as cv
from shared import constants as c
from shared.api.models import CacheBackend
from shared.backend_keys import injected_by
from shared.engine_versions import LMCACHE
from shared.objects import meta

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodVersions:
    """One engine pod's kernel check: ``finished`` once it terminated; ``versions`` what
    its verdict reported (none for a check from before the field)."""

    name: str
    finished: bool
    versions: dict[str, str]

    def text(self) -> str:
        if not self.finished:
            return f"{self.name}: kernel check not finished"
        if not self.versions:
            return f"{self.name}: not reported"
        return f"{self.name}: " + ", ".join(
            f"{p} {self.versions[p]}" for p in cv.VERSIONED_PACKAGES if p in self.versions
        )


def runs_kernel_check(pod: Obj) -> bool:
    """The webhook records the check's mode on every pod it gave the check."""
    return bool(meta(pod).annotations.get(c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE))


def wants_versions(cb: Obj, pods: Sequence[Obj]) -> bool:
    """Whether the backend has an injected engine pod that runs the kernel check (only
    then are its pods read in full): ``pods`` as metadata."""
    return any(injected_by(p, cb) and runs_kernel_check(p) for p in pods)


def pod_versions(pod: Obj) -> PodVersions:
    terminated = cv.kernel_check_termination(pod)
    verdict = cv.parse_kernel_check_verdict(terminated.get("message")) if terminated else None
    return PodVersions(meta(pod).name, terminated is not None, dict(cv.reported_versions(verdict)))


def _server_image(cb: Obj) -> str | None:
    """The managed LMCache server's image of a backend object (None when it does not parse)."""
    try:
        backend = CacheBackend.model_validate(dict(cb))
    except ValueError:
        return None
    return cv.lmcache_server_image(backend)


def check_versions(cb: Obj, pods: Sequence[Obj]) -> list[Finding]:
    """``pods``: the backend's namespace's pods, in full. ``backend.EngineVersions``
    lists each injected pod's reported versions and the server's; ``backend.
    ClientServerSkew`` names the pods whose lmcache client differs from the server."""
    ref = ref_of(cb)
    mine = sorted(
        (pod_versions(p) for p in pods if injected_by(p, cb) and runs_kernel_check(p)),
        key=lambda v: v.name,
    )
    if not mine:
        return []
    image = _server_image(cb)
    server = cv.server_version_of_image(image) if image is not None else None
    listed = "; ".join(v.text() for v in mine)
    if server is None:
        server_text = ""
    elif server.version is None:
        server_text = f"; LMCache server {server.image}: version unknown ({server.why})"
    else:
        server_text = f"; LMCache server {server.image}: lmcache {server.version}"
    out = [
        finding(
            "backend.EngineVersions",
            ref,
            f"engine pods: {listed}{server_text}",
            "",
            pods=[{"name": v.name, "finished": v.finished, "versions": v.versions} for v in mine],
            server=None if server is None else {"image": server.image, "version": server.version},
        )
    ]
    if server is None or server.version is None:
        return out
    skewed = [
        v
        for v in mine
        if LMCACHE in v.versions and cv.client_skewed(v.versions[LMCACHE], server.version)
    ]
    if skewed:
        names = ", ".join(f"{v.name} (lmcache {v.versions[LMCACHE]})" for v in skewed)
        out.append(
            finding(
                "backend.ClientServerSkew",
                ref,
                f"the lmcache client of {names} differs from the LMCache server's "
                f"{server.version} ({server.image}) in major.minor: remote stores may fail "
                "and tier 2 serve no reload",
                "align spec.remoteStorage.lmCacheServer.image with the engine image's lmcache "
                "(or the engine image with the server), then roll the engines",
                server=server.version,
                skewed={v.name: v.versions[LMCACHE] for v in skewed},
            )
        )
    return out
