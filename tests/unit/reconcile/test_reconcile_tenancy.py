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
from shared.storage_providers.render import (
    ANNOTATION_COPY_OF,
    ANNOTATION_SHARED_WITH,
    password_digest,
    secret_digest_key,
    secret_password,
)
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
COPY = "reader-redis-auth-copy"
# The name copies had before they had their own: a managed Redis's password Secret's.
OLD_COPY = "reader-redis-auth"


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
    copy_ = kube.objects[("secrets", "team-b", COPY)]
    assert secret_password(copy_) == secret_password(owner_secret)
    assert copy_["metadata"]["ownerReferences"][0]["uid"] == "uid-team-b-reader"
    assert copy_["metadata"]["annotations"][ANNOTATION_COPY_OF] == "team-a/cache-redis-auth"
    assert ready(kube, "team-b")["status"] == "True"
    # Rotation: the owner's Secret gets a new password; the copy follows.
    owner_secret["data"]["password"] = base64.b64encode(b"rotated").decode()
    rec.reconcile("team-b/reader")
    assert secret_password(kube.objects[("secrets", "team-b", COPY)]) == "rotated"


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
    assert ("secrets", "team-c", COPY) not in kube.objects
    assert len(refusals(kube)) == 1
    rec.reconcile("team-c/reader")
    assert len(refusals(kube)) == 1, "one Event per transition"
    # Consent withdrawn from team-b: its copy goes, and it says so.
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", COPY) in kube.objects
    kube.objects[("cachebackends", "team-a", "cache")]["metadata"]["annotations"] = {
        CONSENT: "team-x"
    }
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", COPY) not in kube.objects
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


def test_a_consumer_that_leaves_the_tier_loses_its_copy_within_one_reconcile() -> None:
    """Rule "Copies follow consent": a consumer that turns host-only (no remoteStorage:
    no provider left to say it may hold a Secret) still has its Secrets read by name,
    and the copy is shed by the same pass."""
    kube = setup("team-b")
    reader = kube.objects[("cachebackends", "team-b", "reader")]
    reader["metadata"]["generation"] = 1
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", COPY) in kube.objects
    # As the API server does it: the spec edit moves the generation on.
    reader["spec"].pop("remoteStorage")
    reader["metadata"]["generation"] = 2
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", COPY) not in kube.objects


def legacy_copy(kube: FakeKube) -> dict[str, Any]:
    """The copy as it was made before copies had their own name and marker: under the
    consumer's managed-Redis name, the password key only, owned by the consumer."""
    kube.put("cachebackends", stored("team-b", "reader", CONSUMER_SPEC))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": OLD_COPY,
            "namespace": "team-b",
            "labels": {
                "app.kubernetes.io/managed-by": "inference-cache",
                "app.kubernetes.io/name": "redis",
                "inferencecache.io/cachebackend": "reader",
            },
            "ownerReferences": [
                {
                    "apiVersion": c.API_VERSION,
                    "kind": c.KIND,
                    "name": "reader",
                    "uid": "uid-team-b-reader",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "type": "Opaque",
        "data": {"password": base64.b64encode(b"the-owners-password").decode()},
    }
    kube.put("secrets", secret)
    return secret


def test_a_copy_under_the_old_name_is_renamed() -> None:
    """Migration: the old-name copy (recognised by its owner reference and its shape) is
    replaced by one under the new name, marked with its source, and deleted."""
    kube = setup("team-b")
    legacy_copy(kube)
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    rec.reconcile("team-b/reader")
    assert ("secrets", "team-b", OLD_COPY) not in kube.objects
    renamed = kube.objects[("secrets", "team-b", COPY)]
    owner_secret = kube.objects[("secrets", "team-a", "cache-redis-auth")]
    assert secret_password(renamed) == secret_password(owner_secret)
    assert renamed["metadata"]["annotations"][ANNOTATION_COPY_OF] == "team-a/cache-redis-auth"


def test_a_managed_tier_never_adopts_a_copy() -> None:
    """Rule "No managed tier adopts a copy": a consumer that becomes a managed Redis
    draws its own password, whether the copy it held is unmarked under the old name or
    marked."""
    kube = setup("team-b")
    legacy_copy(kube)
    kube.objects[("cachebackends", "team-b", "reader")]["spec"] = copy.deepcopy(OWNER_SPEC)
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-b/reader")
    own = kube.objects[("secrets", "team-b", OLD_COPY)]
    assert secret_password(own) not in (None, "the-owners-password")
    assert "server.conf" in own["data"]
    assert ANNOTATION_COPY_OF not in (own["metadata"].get("annotations") or {})


def redis_digest(kube: FakeKube) -> str:
    template = kube.objects[("deployments", "team-a", "cache-redis")]["spec"]["template"]
    return str(template["metadata"]["annotations"][c.ANNOTATION_AUTH_DIGEST])


def test_withdrawing_consent_rotates_the_owners_password_and_rolls_redis() -> None:
    """Rule "Revoking consent rotates the password": a namespace leaving the consent gets
    the owner a new password (Redis's template digest changes, so Redis rolls and the
    cascade rolls the owner's engines, as for a manual rotation); widening it does not."""
    kube = setup("team-b")
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    owner = ("secrets", "team-a", "cache-redis-auth")
    first = secret_password(kube.objects[owner])
    assert kube.objects[owner]["metadata"]["annotations"][ANNOTATION_SHARED_WITH] == "team-b"
    annotations = kube.objects[("cachebackends", "team-a", "cache")]["metadata"]["annotations"]
    annotations[CONSENT] = "team-b,team-c"
    rec.reconcile("team-a/cache")
    assert secret_password(kube.objects[owner]) == first, "widening consent keeps it"
    assert kube.objects[owner]["metadata"]["annotations"][ANNOTATION_SHARED_WITH] == (
        "team-b,team-c"
    )
    digest = redis_digest(kube)
    annotations[CONSENT] = "team-c"
    rec.reconcile("team-a/cache")
    rotated = secret_password(kube.objects[owner])
    assert rotated not in (None, first)
    assert redis_digest(kube) != digest
    assert redis_digest(kube) == password_digest(
        str(rotated), str(secret_digest_key(kube.objects[owner]))
    )
    rec.reconcile("team-a/cache")
    assert secret_password(kube.objects[owner]) == rotated, "once, not on every pass"


def test_a_secret_from_before_the_record_and_the_key_keeps_its_password() -> None:
    """Upgrade: a password Secret without the shared-with record or the digest key keeps
    its password (the record starts from today's consent) and gets a key, so Redis's
    template digest changes once."""
    kube = setup("team-b")
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("team-a/cache")
    owner = ("secrets", "team-a", "cache-redis-auth")
    password = secret_password(kube.objects[owner])
    kube.objects[owner]["metadata"].pop("annotations")
    kube.objects[owner]["data"].pop("digest-key")
    digest = redis_digest(kube)
    rec.reconcile("team-a/cache")
    assert secret_password(kube.objects[owner]) == password
    assert secret_digest_key(kube.objects[owner]) is not None
    assert redis_digest(kube) != digest


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
