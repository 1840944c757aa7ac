"""A managed tier whose pods the API server refuses (Ready=False/PodCreationFailed):
the cause, in the API server's words from the condition's message, and the fix for
the kinds of refusal a platform engineer meets. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from icache_install.doctor.findings import Finding, ObjectRef, finding
from shared import constants as c
from shared.objects import meta

POD_CREATION_FAILED_CODE: Final = "backend.PodCreationFailed"

#: (a fragment of the API server's message, the fix), first match wins.
FIXES: Final[tuple[tuple[str, str], ...]] = (
    (
        "violates PodSecurity",
        "the namespace's Pod Security level refuses the pod: the managed tier satisfies "
        "`restricted` by default, so remove what spec.template asks for beyond it (the "
        "message names it, e.g. securityContext.runAsUser: 0 or an Unconfined seccomp "
        "profile); only if the tier needs it, relabel the namespace "
        "(pod-security.kubernetes.io/enforce) to a level that allows it",
    ),
    (
        "exceeded quota",
        "a ResourceQuota of the namespace is used up: raise it, or lower "
        "spec.remoteStorage.<provider>.resources (or spec.replicas)",
    ),
    (
        "must specify",
        "a ResourceQuota of the namespace requires requests/limits the pod does not set: set "
        "them in spec.remoteStorage.<provider>.resources",
    ),
    (
        "LimitRange",
        "a LimitRange of the namespace refuses the pod's resources: fit "
        "spec.remoteStorage.<provider>.resources to it",
    ),
    (
        "serviceaccount",
        "spec.template.serviceAccountName names a ServiceAccount that does not exist: "
        "create it or remove the field",
    ),
)
DEFAULT_FIX: Final = (
    "read the API server's refusal in the message (kubectl -n {ns} describe cb {name}) and "
    "change what it names; the workload retries on its own"
)


def pod_creation_fix(message: str) -> str:
    """The fix for the refusal ``message`` describes (the generic step when unknown)."""
    lowered = message.lower()
    for fragment, fix in FIXES:
        if fragment.lower() in lowered:
            return fix
    return DEFAULT_FIX


def check_pod_creation(cb: Mapping[str, Any]) -> list[Finding]:
    """backend.PodCreationFailed for a backend whose Ready condition says its workload
    cannot create its pods; nothing otherwise."""
    view = meta(cb)
    ns, name = view.namespace, view.name
    ready = next(
        (
            x
            for x in (cb.get("status") or {}).get("conditions") or []
            if x.get("type") == c.COND_READY
        ),
        None,
    )
    if ready is None or ready.get("reason") != c.REASON_POD_CREATION_FAILED:
        return []
    message = str(ready.get("message") or "").strip()
    return [
        finding(
            POD_CREATION_FAILED_CODE,
            ObjectRef(c.KIND, name, ns),
            f"the managed tier has no pods: the API server refuses them. {message}",
            pod_creation_fix(message).format(ns=ns, name=name),
            conditionMessage=message,
        )
    ]
