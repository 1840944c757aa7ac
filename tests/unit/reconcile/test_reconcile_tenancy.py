"""The reconcile shell over cross-namespace consent (docs/decisions.md,
"Cross-namespace consumers need the owner's consent"): the owner's policy follows its
consenting consumers, a consumer of a managed Redis gets a credentials copy it owns and
that follows a rotation, and a refused consumer is not Ready, says why, and gets one
Warning Event per transition. The real-API-server proof is
tests/e2e/tiers/test_tier_isolation.py."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from typing import Any

import pytest

from shared import constants as c
from shared.conditions import find
from shared.storage_providers.render import secret_password
from tests.fakes import FakeKube, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
OWNER_SPEC: dict[str, Any] = {
    "runtime": "SGLang",
    "type": "LMCache",
    "engineSelector": {"matchLabels": {"app": "engine"}},
    "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
}
CONSUMER_SPEC: dict[str, Any] = {
    "runtime": "SGLang",
    "type": "LMCache",
    "allowCrossNamespace": True,
    "engineSelector": {"matchLabels": {"app": "b-engine"}},
    "remoteStorage": {
        "provider": "Redis",
        "ownership": "External",
        "endpoint": "cache-redis.team-a.svc:6379",
    },
}
CONSENT = c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES


def stored(ns: str, name: str, spec: dict[str, Any], **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": meta,
        "spec": copy.deepcopy(spec),
    }


def setup(consent: str | None) -> FakeKube:
    kube = FakeKube()
    annotations = {CONSENT: consent} if consent else {}
    kube.put("cachebackends", stored("team-a", "cache", OWNER_SPEC, **annotations))
    kube.put("cachebackends", stored("team-b", "reader", CONSUMER_SPEC))
    kube.put("cachebackends", stored("team-c", "reader", CONSUMER_SPEC))
    return kube


def peers(kube: FakeKube) -> list[dict[str, Any]]:
    policy = kube.objects[("networkpolicies", "team-a", "cache-redis")]
    return list(policy["spec"]["ingress"][0]["from"])


def ready(kube: FakeKube, ns: str) -> dict[str, Any]:
    status = kube.objects[("cachebackends", ns, "reader")].get("status") or {}
    cond = find(status.get("conditions"), c.COND_READY)
    assert cond is not None
    return cond


def refusals(kube: FakeKube) -> list[dict[str, Any]]:
    return [e for e in kube.events.values() if e.get("reason") == c.EVENT_CROSS_NAMESPACE_REFUSED]


def test_the_policy_admits_only_the_consenting_namespaces_consumers() -> None:
    kube = setup("team-b")
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    assert peers(kube) == [
        {"podSelector": {"matchLabels": {"app": "engine"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}},
            "podSelector": {"matchLabels": {"app": "b-engine"}},
        },
    ]
    kube.writes.clear()
    assert rec.reconcile("team-a/cache").writes == 0, "an idle reconcile writes nothing"


def test_the_policy_follows_consent_as_it_comes_and_goes() -> None:
    kube = setup(None)
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    assert len(peers(kube)) == 1
    kube.objects[("cachebackends", "team-a", "cache")]["metadata"]["annotations"] = {
        CONSENT: "team-b,team-c"
    }
    rec.reconcile("team-a/cache")
    assert len(peers(kube)) == 3
    kube.objects.pop(("cachebackends", "team-c", "reader"))
    rec.reconcile("team-a/cache")
    assert len(peers(kube)) == 2, "a consumer that goes is dropped"


def test_a_consenting_owners_redis_consumer_gets_a_copy_that_follows_rotation() -> None:
    kube = setup("team-b")
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    rec.reconcile("team-b/reader")
    owner_secret = kube.objects[("secrets", "team-a", "cache-redis-auth")]
    copy_ = kube.objects[("secrets", "team-b", "reader-redis-auth")]
    assert secret_password(copy_) == secret_password(owner_secret)
    assert copy_["metadata"]["ownerReferences"][0]["uid"] == "uid-team-b-reader"
    assert ready(kube, "team-b")["status"] == "True"
    # Rotation: the owner's Secret gets a new password; the copy follows.
    owner_secret["data"]["password"] = base64.b64encode(b"rotated").decode()
    rec.reconcile("team-b/reader")
    assert secret_password(kube.objects[("secrets", "team-b", "reader-redis-auth")]) == "rotated"


def test_a_refused_consumer_is_not_ready_and_says_why_once() -> None:
    """Rule "A refused consumer says so": no consent -> Ready False, the reason and the
    namespace in the condition, one Warning Event; withdrawing consent sheds the copy."""
    kube = setup("team-b")
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    rec.reconcile("team-c/reader")
    cond = ready(kube, "team-c")
    assert (cond["status"], cond["reason"]) == ("False", c.REASON_CROSS_NAMESPACE_CONSENT_MISSING)
    assert "'team-c'" in cond["message"]
    assert ("secrets", "team-c", "reader-redis-auth") not in kube.objects
    assert len(refusals(kube)) == 1
    rec.reconcile("team-c/reader")
    assert len(refusals(kube)) == 1, "one Event per transition"
    # Consent withdrawn from team-b: its copy goes, and it says so.
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", "reader-redis-auth") in kube.objects
    kube.objects[("cachebackends", "team-a", "cache")]["metadata"]["annotations"] = {
        CONSENT: "team-x"
    }
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", "reader-redis-auth") not in kube.objects
    assert ready(kube, "team-b")["reason"] == c.REASON_CROSS_NAMESPACE_CONSENT_MISSING
    assert len(refusals(kube)) == 2


def test_a_consumer_without_credentials_to_copy_says_so() -> None:
    kube = setup("team-b")
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    kube.objects.pop(("secrets", "team-a", "cache-redis-auth"))
    rec.reconcile("team-b/reader")
    cond = ready(kube, "team-b")
    assert (cond["status"], cond["reason"]) == (
        "False",
        c.REASON_CROSS_NAMESPACE_CREDENTIALS_MISSING,
    )
    assert "'team-b'" in cond["message"]


@pytest.mark.parametrize(
    "endpoint",
    [
        "cache-redis.team-a:6379",
        "cache-redis.team-a.svc:6379",
        "cache-redis.team-a.svc.cluster.local:6379",
        "CACHE-REDIS.team-a.svc.cluster.local.:6379",
    ],
)
def test_any_service_form_is_a_consumer_of_the_tier(endpoint: str) -> None:
    """Rule "Any Service form counts": a consumer naming the tier's Service in any form an
    engine pod resolves is judged by consent. Consenting team-b is admitted and given
    credentials; team-c, with no consent, is refused and says so (never Ready with
    engines the NetworkPolicy refuses)."""
    kube = FakeKube()
    kube.put("cachebackends", stored("team-a", "cache", OWNER_SPEC, **{CONSENT: "team-b"}))
    spec = copy.deepcopy(CONSUMER_SPEC)
    spec["remoteStorage"]["endpoint"] = endpoint
    kube.put("cachebackends", stored("team-b", "reader", spec))
    kube.put("cachebackends", stored("team-c", "reader", spec))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    rec.reconcile("team-b/reader")
    rec.reconcile("team-c/reader")
    assert peers(kube)[1]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-b"}
    }
    assert ready(kube, "team-b")["status"] == "True"
    assert any(kind == "secrets" and ns == "team-b" for kind, ns, _ in kube.objects)
    cond = ready(kube, "team-c")
    assert (cond["status"], cond["reason"]) == ("False", c.REASON_CROSS_NAMESPACE_CONSENT_MISSING)
    assert not any(kind == "secrets" and ns == "team-c" for kind, ns, _ in kube.objects)
