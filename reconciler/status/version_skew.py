"""Pure decisions on the engine releases the kernel check reports: one function per rule.

The ``lmcache-kernel-check`` verdict carries the versions it read from the engine image's
installed package metadata (``reconciler.status.engine_pods.KernelCheckReport.versions``). Two
advisory conditions come from them; neither ever gates Ready (tier 2 is an optimisation
and stays fail-open), and a pod list that failed this time keeps the prior condition.

- ``LMCacheVersionSkew`` (Managed ``LMCacheServer`` backends only): the server's version
  is the tag of the image we provision (``lmcache/standalone:vX.Y.Z``); every reporting
  engine pod's ``lmcache`` client is compared with it in major.minor, the unit in which
  the two sides' wire protocol moves. A digest or an unparsable tag is an unknown server
  version, said so, never guessed.
- ``EngineVersionBelowMinimum`` (the engine-side advisory modes): an engine's vLLM or
  LMCache release older than the minimum the engine-contract tests prove for its wiring
  (``shared.engine_versions.minimum_for``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from reconciler.status.engine_pods import (
    KERNEL_PENDING,
    MAX_PODS_NAMED,
    InjectedPodsObservation,
    KernelCheckReport,
)
from shared import constants as c
from shared import engine_versions as ev
from shared.client_versions import client_skewed, server_version_of_image
from shared.conditions import FALSE, TRUE, UNKNOWN, DesiredCondition, as_desired
from shared.engine_versions import LMCACHE, VLLM

# Packages whose minimum release the worker checks (the kernel check runs on vLLM+LMCache).
MINIMUM_CHECKED: Final = (VLLM, LMCACHE)


def _named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_PODS_NAMED])
    more = len(items) - MAX_PODS_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def _finished(reports: Sequence[KernelCheckReport]) -> list[KernelCheckReport]:
    return [r for r in reports if r.state != KERNEL_PENDING]


def lmcache_version_skew_condition(
    server_image: str,
    injected: InjectedPodsObservation | None,
    previous: dict[str, Any] | None,
) -> DesiredCondition | None:
    """LMCacheVersionSkew of a Managed LMCacheServer backend.

    - True/ClientServerVersionSkew: a reporting engine pod's lmcache client differs from
      the server in major.minor (the message lists every reporting pod's client and the
      server's version);
    - Unknown/ServerVersionUnknown: pods report a client but the server image names no
      release;
    - False/VersionsAligned: every reporting pod's client matches the server;
    - Unknown/ClientVersionUnknown: checks finished but none reported an lmcache client
      (none installed in the image, e.g. pip-installed at engine start, or a check from
      before versions were reported);
    - absent: no engine pod has finished the check.

    A pod list that failed this time (None) keeps the prior condition.
    """
    if injected is None:
        return as_desired(previous)
    finished = _finished(injected.kernel_checks)
    if not finished:
        return None
    server = server_version_of_image(server_image)
    reporting = [(r.pod, r.version(LMCACHE)) for r in finished if r.version(LMCACHE)]
    silent = [r.pod for r in finished if not r.version(LMCACHE)]
    silent_note = (
        f" Not reported by {_named(silent)} (no lmcache package metadata in the image, "
        "e.g. a client pip-installed at engine start, or a check from before versions "
        "were reported)."
        if silent
        else ""
    )
    if not reporting:
        return DesiredCondition(
            c.COND_LMCACHE_VERSION_SKEW,
            UNKNOWN,
            c.REASON_CLIENT_VERSION_UNKNOWN,
            f"No engine pod reported its lmcache client version; server image {server.image}"
            + (f" (lmcache {server.version})." if server.version else ".")
            + silent_note,
        )
    clients = [f"{pod} (lmcache {version})" for pod, version in reporting]
    if server.version is None:
        return DesiredCondition(
            c.COND_LMCACHE_VERSION_SKEW,
            UNKNOWN,
            c.REASON_SERVER_VERSION_UNKNOWN,
            f"The LMCache server's version is unknown: image {server.image}: {server.why}. "
            f"Engine clients: {_named(clients)}. Pin the server by a release tag "
            "(lmcache/standalone:vX.Y.Z) to have it compared." + silent_note,
        )
    skewed = [
        f"{pod} (lmcache {version})"
        for pod, version in reporting
        if client_skewed(str(version), server.version)
    ]
    if skewed:
        return DesiredCondition(
            c.COND_LMCACHE_VERSION_SKEW,
            TRUE,
            c.REASON_CLIENT_SERVER_VERSION_SKEW,
            f"LMCache server {server.image} is lmcache {server.version}; "
            f"{len(skewed)}/{len(reporting)} reporting engine pod(s) run a client of another "
            f"major.minor: {_named(skewed)}. Engine clients: {_named(clients)}. Remote "
            "stores may fail and tier 2 serve no reloads: align spec.remoteStorage."
            "lmCacheServer.image with the engine image's lmcache." + silent_note,
        )
    return DesiredCondition(
        c.COND_LMCACHE_VERSION_SKEW,
        FALSE,
        c.REASON_VERSIONS_ALIGNED,
        f"LMCache server {server.image} is lmcache {server.version}; every reporting engine "
        f"pod's client matches it in major.minor: {_named(clients)}." + silent_note,
    )


def releases_below_minimum(
    report: KernelCheckReport, minimum: dict[str, str]
) -> list[tuple[str, str, str]]:
    """Rule: (package, version, minimum) for each of the pod's vLLM / LMCache releases
    older than the minimum of its wiring; a version that does not parse is not older."""
    out = []
    for package in MINIMUM_CHECKED:
        version, floor = report.version(package), minimum.get(package)
        if version and floor and ev.older_than(version, floor):
            out.append((package, version, floor))
    return out


def engine_version_below_minimum_condition(
    runtime: str,
    cache_type: str,
    provider: str | None,
    injected: InjectedPodsObservation | None,
    previous: dict[str, Any] | None,
) -> DesiredCondition | None:
    """EngineVersionBelowMinimum: True/ReleaseBelowMinimum when a reporting engine pod's
    vLLM or LMCache release is older than the minimum the engine-contract tests prove for
    this wiring; False/ReleasesAtMinimum when every reporting pod's are at or above it;
    absent when no pod reports a checked release. A failed pod list keeps the prior one."""
    if injected is None:
        return as_desired(previous)
    minimum = ev.minimum_for(runtime, cache_type, provider)
    checked = [
        r
        for r in _finished(injected.kernel_checks)
        if any(r.version(p) and minimum.get(p) for p in MINIMUM_CHECKED)
    ]
    if not checked:
        return None
    floor = ", ".join(f"{p} {minimum[p]}" for p in MINIMUM_CHECKED if p in minimum)
    old = [
        f"{r.pod} ({', '.join(f'{p} {v} < {m}' for p, v, m in below)})"
        for r in checked
        if (below := releases_below_minimum(r, minimum))
    ]
    if old:
        return DesiredCondition(
            c.COND_ENGINE_VERSION_BELOW_MINIMUM,
            TRUE,
            c.REASON_RELEASE_BELOW_MINIMUM,
            f"{len(old)}/{len(checked)} reporting engine pod(s) run a release older than the "
            f"minimum the engine-contract tests prove for this wiring ({floor}): "
            f"{_named(old)}. The injected wiring may not be read as intended: move the "
            "engine image to a newer release (docs/api.md, Engine versions).",
        )
    return DesiredCondition(
        c.COND_ENGINE_VERSION_BELOW_MINIMUM,
        FALSE,
        c.REASON_RELEASES_AT_MINIMUM,
        f"All {len(checked)} reporting engine pod(s) run releases at or above the proven "
        f"minimum for this wiring ({floor}).",
    )
