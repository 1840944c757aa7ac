"""Findings: what `icache doctor` reports, and the catalogue of their stable codes.

A finding names one object, says what is wrong (or right) in a sentence and what to
do next. Its code is stable: scripts and runbooks may match on it (docs/doctor.md
lists every code). Severities: ``error`` (the cache is not working for someone, the
exit code is 1), ``warning`` (it works, but not as configured or not for long),
``info`` (state worth knowing: a wired pod, a healthy condition).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


RANK: Final = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    name: str
    namespace: str = ""

    def __str__(self) -> str:
        return (
            f"{self.kind} {self.namespace}/{self.name}"
            if self.namespace
            else (f"{self.kind} {self.name}")
        )

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name}


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    object: ObjectRef
    message: str
    next_step: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "object": self.object.to_json(),
            "message": self.message,
            "nextStep": self.next_step,
            "details": self.details,
        }


# code -> (severity, what it means): every code doctor can emit except the condition
# codes, which are ``backend.<ConditionType>.<Reason>`` (conditions.py).
CODES: Final[dict[str, tuple[Severity, str]]] = {
    # Install
    "install.CRDMissing": (Severity.ERROR, "the CacheBackend CRD is not installed"),
    "install.CRDVersionNotServed": (
        Severity.ERROR,
        "the CRD does not serve (or store) this binary's version",
    ),
    "install.CRDSchemaDrift": (
        Severity.WARNING,
        "the installed CRD's schema differs from this binary's",
    ),
    "install.WebhookConfigMissing": (Severity.ERROR, "a webhook configuration is missing"),
    "install.WebhookMissing": (Severity.ERROR, "a webhook is missing from its configuration"),
    "install.WebhookFailurePolicy": (
        Severity.ERROR,
        "a webhook's failurePolicy is not the install's: the Pod webhook fails closed, or a "
        "CacheBackend webhook fails open",
    ),
    "install.WebhookTimeout": (Severity.WARNING, "a webhook's timeoutSeconds is unsafe"),
    "install.WebhookNamespaceSelector": (
        Severity.ERROR,
        "the Pod webhook does not exclude the install namespace and kube-system, or a "
        "CacheBackend webhook leaves other namespaces out",
    ),
    "install.CABundleMissing": (Severity.ERROR, "a webhook has no caBundle"),
    "install.CABundleInvalid": (Severity.ERROR, "a caBundle is not PEM certificates"),
    "install.CABundleMismatch": (
        Severity.ERROR,
        "the caBundle does not verify the serving certificate",
    ),
    "install.CABundleExpired": (Severity.ERROR, "the CA in a caBundle has expired"),
    "install.CABundleExpiring": (Severity.WARNING, "the CA in a caBundle expires within 14 days"),
    "install.ServingCertMissing": (Severity.ERROR, "the webhook's TLS Secret is missing"),
    "install.ServingCertInvalid": (Severity.ERROR, "the TLS Secret holds no usable certificate"),
    "install.ServingCertExpired": (Severity.ERROR, "the serving certificate has expired"),
    "install.ServingCertExpiring": (
        Severity.WARNING,
        "the serving certificate expires within 14 days",
    ),
    "install.ServingCertHostMismatch": (
        Severity.ERROR,
        "the serving certificate does not name the host the API server calls",
    ),
    "install.DeploymentMissing": (Severity.ERROR, "a Deployment of the install is missing"),
    "install.DeploymentUnavailable": (Severity.ERROR, "a Deployment of the install is unavailable"),
    "install.LeaseMissing": (Severity.ERROR, "the dispatcher's leader Lease does not exist"),
    "install.LeaseStale": (Severity.ERROR, "no dispatcher has renewed the leader Lease in time"),
    "install.RedisSecretMissing": (Severity.ERROR, "the Redis password Secret is missing"),
    # Per CacheBackend
    "backend.NotReconciled": (Severity.WARNING, "the backend has no status conditions yet"),
    "backend.ObservedGenerationLagging": (
        Severity.WARNING,
        "the status describes an older generation of the spec",
    ),
    "backend.NoEngineSelector": (Severity.WARNING, "the backend has no engineSelector"),
    "backend.SelectorMatchesNoPod": (Severity.WARNING, "no pod matches the engineSelector"),
    "backend.SelectorOverlap": (
        Severity.WARNING,
        "another backend's selector claims the same pods; the first in list order wins",
    ),
    "backend.MooncakeWithoutHostNetwork": (
        Severity.ERROR,
        "a Mooncake backend without spec.integration.engineHostNetwork",
    ),
    "backend.FailClosed": (
        Severity.WARNING,
        "failOpen: false makes the cache a serving dependency",
    ),
    "backend.PodCreationFailed": (
        Severity.ERROR,
        "the API server refuses the managed tier's pods (Pod Security, a quota): the cause "
        "and its fix",
    ),
    "backend.UnknownCondition": (Severity.WARNING, "a condition reason the spec does not define"),
    "backend.EngineVersions": (
        Severity.INFO,
        "the lmcache, vllm and torch releases each injected engine pod's kernel check "
        "reported, and the managed LMCache server's version",
    ),
    "backend.ClientServerSkew": (
        Severity.WARNING,
        "an engine pod's lmcache client differs from the managed LMCache server in major.minor",
    ),
    # Per engine pod
    "pod.Wired": (Severity.INFO, "the pod is wired to the live backend"),
    "pod.StaleUID": (Severity.ERROR, "the pod was wired by a backend since re-created"),
    "pod.InjectedWithoutUID": (
        Severity.WARNING,
        "the pod names its backend but carries no injected-by-uid",
    ),
    "pod.InjectedByMissingBackend": (
        Severity.ERROR,
        "the pod was wired by a backend that no longer exists",
    ),
    "pod.WiredToAnotherBackend": (
        Severity.WARNING,
        "the pod is wired to a backend other than the one selecting it now",
    ),
    "pod.SkipInject": (Severity.INFO, "the pod opted out with skip-inject"),
    "pod.EngineOffloadingConflict": (
        Severity.WARNING,
        "the pod is unwired: its own --kv-offloading-size overwrites the KV connector",
    ),
    "pod.PinnedHostMemoryOverLimit": (
        Severity.WARNING,
        "a container of an injected pod pins more host memory than its memory limit",
    ),
    "pod.UnwiredCreatedBeforeBackend": (
        Severity.ERROR,
        "the pod is unwired: it was created before its backend",
    ),
    "pod.UnwiredNoEndpoint": (
        Severity.ERROR,
        "the pod is unwired: its backend has no endpoint",
    ),
    "pod.UnwiredCreatedBeforeEndpoint": (
        Severity.ERROR,
        "the pod is unwired: it was created before its backend had an endpoint",
    ),
    "pod.UnwiredWebhookDown": (
        Severity.ERROR,
        "the pod is unwired: the webhook was not available when it was created",
    ),
    "pod.Unwired": (Severity.ERROR, "the pod is unwired, for a reason not recorded in the cluster"),
    # The engines' own view of the tier, from Prometheus (doctor --prometheus)
    "backend.OffloadNoHits": (
        Severity.WARNING,
        "the engines look prompts up in the offload tier and find nothing there",
    ),
    "backend.RemoteTierErrors": (
        Severity.ERROR,
        "the engines report errors reaching the remote tier",
    ),
    "backend.LMCacheUnhealthy": (Severity.ERROR, "LMCache reports itself unhealthy"),
    "backend.OffloadHitRatio": (Severity.INFO, "the engines' offload hit ratio"),
    "backend.NoEngineMetrics": (
        Severity.WARNING,
        "Prometheus has no engine series of the backend: its engines are not scraped",
    ),
    "doctor.PrometheusQueryFailed": (Severity.ERROR, "a query to --prometheus failed"),
    # The doctor itself
    # An error: a check that could not run must not let a CI gate pass.
    "doctor.ReadForbidden": (Severity.ERROR, "a check could not read what it needs (RBAC)"),
    "doctor.ReadFailed": (Severity.ERROR, "a check could not read what it needs"),
}


def finding(
    code: str, obj: ObjectRef, message: str, next_step: str = "", **details: Any
) -> Finding:
    """A finding of a catalogued code, at the code's severity: one severity per code."""
    severity, _ = CODES[code]
    return Finding(code, severity, obj, message, next_step, dict(details))
