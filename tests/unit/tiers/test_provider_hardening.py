"""Managed provider pods are hardened (decision "Managed tiers restricted by default"):
Pod Security ``restricted`` as the API server checks it, no ServiceAccount token, a
read-only root with emptyDirs for what the server writes, egress closed, and
spec.template.securityContext merged field by field over our defaults (the spec's
"Template Overrides": fields are merged with the managed defaults)."""

from __future__ import annotations

from typing import Any

import pytest

from shared import constants as c
from shared.storage_providers.render import render_managed_objects
from tests.builders import by_kind
from tests.builders import managed_spec as managed
from tests.builders import rendered_backend as backend

RESTRICTED_PROVIDERS = (c.PROVIDER_REDIS, c.PROVIDER_LMCACHE_SERVER)


def pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = by_kind(render_managed_objects(backend(spec)))["Deployment"]["spec"][
        "template"
    ]["spec"]
    return out


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What Pod Security ``restricted`` (latest) checks that a provider pod could break:
    a re-statement of the policy's checks over the fields we render."""
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        out.append("host namespaces")
    for ctr in pod["containers"]:
        sc = ctr.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append("allowPrivilegeEscalation != false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            out.append("capabilities.drop != [ALL]")
        if (sc.get("capabilities") or {}).get("add"):
            out.append("capabilities.add")
        if sc.get("privileged"):
            out.append("privileged")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append("runAsNonRoot != true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append("runAsUser=0")
        seccomp = sc.get("seccompProfile") or psc.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            out.append("seccompProfile")
    for vol in pod.get("volumes") or []:
        if set(vol) - {"name"} - {"emptyDir", "secret", "configMap", "projected"}:
            out.append(f"volume type of {vol['name']}")
    return out


@pytest.mark.parametrize("provider", RESTRICTED_PROVIDERS)
def test_provider_pod_satisfies_restricted(provider: str) -> None:
    """Restricted by default: runAsNonRoot with the image's user, no escalation, drop
    ALL, RuntimeDefault seccomp."""
    pod = pod_spec(managed(provider))
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["runAsGroup"] > 0


def test_redis_runs_as_the_official_image_user() -> None:
    """Redis's official image runs as uid/gid 999 (as the control plane's own Redis)."""
    psc = pod_spec(managed(c.PROVIDER_REDIS))["securityContext"]
    assert (psc["runAsUser"], psc["runAsGroup"], psc["fsGroup"]) == (999, 999, 999)


@pytest.mark.parametrize("provider", [*RESTRICTED_PROVIDERS, c.PROVIDER_MOONCAKE])
def test_no_service_account_token(provider: str) -> None:
    """automountServiceAccountToken: false on every managed tier."""
    assert pod_spec(managed(provider))["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("provider", "paths"),
    [(c.PROVIDER_REDIS, {"/data"}), (c.PROVIDER_LMCACHE_SERVER, {"/tmp"})],
)
def test_read_only_root_with_an_empty_dir_per_written_path(provider: str, paths: set[str]) -> None:
    """A read-only root filesystem, each path the server writes on an emptyDir (the
    read-only mounts, such as Redis's password config, are not written)."""
    pod = pod_spec(managed(provider))
    ctr = pod["containers"][0]
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"] if not m.get("readOnly")}
    assert set(mounts) == paths
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("emptyDir" in volumes[name] for name in mounts.values())


def test_lmcache_server_home_and_temp_on_its_scratch_dir() -> None:
    """The LMCache server's HOME and TMPDIR point at its emptyDir (nothing else is
    writable)."""
    ctr = pod_spec(managed(c.PROVIDER_LMCACHE_SERVER))["containers"][0]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["HOME"] == env["TMPDIR"] == "/tmp"


def test_mooncake_gets_what_host_network_allows() -> None:
    """Mooncake (host network): no escalation, no capabilities, RuntimeDefault, no
    token; the image's own user and a writable root (nothing known to mount)."""
    pod = pod_spec(managed(c.PROVIDER_MOONCAKE))
    sc = pod["containers"][0]["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["hostNetwork"] is True


def test_template_security_context_merges_field_by_field() -> None:
    """spec.template.securityContext: each field set wins, the others keep ours."""
    template = {"securityContext": {"fsGroup": 2000, "supplementalGroups": [3000]}}
    psc = pod_spec(managed(c.PROVIDER_REDIS, template=template))["securityContext"]
    assert psc == {
        "runAsNonRoot": True,
        "runAsUser": 999,
        "runAsGroup": 999,
        "fsGroup": 2000,
        "supplementalGroups": [3000],
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_template_can_ask_for_what_restricted_refuses() -> None:
    """A template override wins even where Pod Security refuses it: the refusal is the
    API server's to make, and the backend reports it (PodCreationFailed)."""
    template = {"securityContext": {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}}}
    pod = pod_spec(managed(c.PROVIDER_LMCACHE_SERVER, template=template))
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert "runAsUser=0" in restricted_violations(pod)


@pytest.mark.parametrize("provider", RESTRICTED_PROVIDERS)
def test_network_policy_denies_egress(provider: str) -> None:
    """Egress closed: the policy isolates Egress too, with no egress rule (a cache
    server dials nothing, DNS included)."""
    policy = by_kind(render_managed_objects(backend(managed(provider))))["NetworkPolicy"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == []
