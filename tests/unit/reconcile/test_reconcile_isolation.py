"""The reconcile shell converges a managed tier's password Secret and NetworkPolicy like
its other owned objects: created (a backend from before this change gets them on its
next reconcile), left alone when unchanged, repaired on drift, and the password kept
while the Secret holds one. The real-API-server proof is tests/e2e/tiers/test_tier_isolation.py.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
from typing import Any

from kubeio import client as k
from reconciler.steps.reads import LiveReads
from shared import constants as c
from shared.storage_providers.base import AUTH_CONFIG_KEY
from shared.storage_providers.render import password_digest, secret_digest_key, secret_password
from tests.builders import status_backend
from tests.fakes import FakeKube, in_process_reconciler

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
SECRET = "cb-redis-auth"
WORKLOAD = "cb-redis"


# The backend the tests reconcile: SGLang over a Managed Redis tier.
REDIS_SPEC: dict[str, Any] = {
    "runtime": "SGLang",
    "type": "LMCache",
    "engineSelector": {"matchLabels": {"app": "engine"}},
    "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
}
UID = "cb-uid"


def obj(kube: FakeKube, plural: str, name: str) -> dict[str, Any]:
    return kube.objects[(plural, "ns", name)]


def digest(kube: FakeKube) -> str:
    template = obj(kube, "deployments", WORKLOAD)["spec"]["template"]
    return str(template["metadata"]["annotations"][c.ANNOTATION_AUTH_DIGEST])


def keyed(kube: FakeKube, password: str) -> str:
    """The digest of ``password`` under the key the Secret holds."""
    return password_digest(password, str(secret_digest_key(obj(kube, "secrets", SECRET))))


def test_first_reconcile_creates_secret_policy_and_a_redis_that_reads_the_secret() -> None:
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    applied = [(verb, plural) for verb, plural, _ in kube.writes if verb == "apply"]
    assert applied[:2] == [("apply", "secrets"), ("apply", "networkpolicies")]
    password = secret_password(obj(kube, "secrets", SECRET))
    assert password is not None
    assert digest(kube) == keyed(kube, password)
    # Idle: nothing more to write.
    kube.writes.clear()
    assert rec.reconcile("ns/cb").writes == 0


def test_a_deleted_secret_is_recreated_with_a_new_password_and_redis_rolls() -> None:
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    old = secret_password(obj(kube, "secrets", SECRET))
    kube.delete(k.SECRETS, "ns", SECRET)
    kube.writes.clear()
    rec.reconcile("ns/cb")
    new = secret_password(obj(kube, "secrets", SECRET))
    assert new not in (None, old)
    assert digest(kube) == keyed(kube, str(new))
    assert ("apply", "deployments", WORKLOAD) in kube.writes


def test_a_drifted_policy_is_repaired() -> None:
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    policy = obj(kube, "networkpolicies", WORKLOAD)
    wanted = policy["spec"]["ingress"]
    policy["spec"]["ingress"] = [{}]  # opened to everyone
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == [("apply", "networkpolicies", WORKLOAD)]
    assert obj(kube, "networkpolicies", WORKLOAD)["spec"]["ingress"] == wanted


def test_the_opt_out_sheds_the_policy_and_keeps_the_password() -> None:
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    password = secret_password(obj(kube, "secrets", SECRET))
    kube.put(
        "cachebackends",
        status_backend(
            copy.deepcopy(REDIS_SPEC),
            annotations={c.ANNOTATION_SKIP_NETWORK_POLICY: "true"},
            uid=UID,
        ),
    )
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert ("delete", "networkpolicies", WORKLOAD) in kube.writes
    assert ("networkpolicies", "ns", WORKLOAD) not in kube.objects
    assert secret_password(obj(kube, "secrets", SECRET)) == password


class SecretsNotListed(LiveReads):
    """A read of the owned Secrets that missed it (a race with its creation)."""

    def owned_secrets(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return []


def test_a_secret_the_list_missed_is_read_and_its_password_kept() -> None:
    """The password is rendered from the live Secret; one read by name (not listed yet)
    is ours all the same, and must not be replaced by a new random password."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    in_process_reconciler(kube, clock=lambda: NOW).reconcile("ns/cb")
    password = secret_password(obj(kube, "secrets", SECRET))
    kube.writes.clear()
    in_process_reconciler(kube, clock=lambda: NOW, reads=SecretsNotListed(kube)).reconcile("ns/cb")
    assert secret_password(obj(kube, "secrets", SECRET)) == password
    assert [w for w in kube.writes if w[0] == "apply"] == []


def test_a_password_written_into_the_secret_is_kept_and_rolls_redis() -> None:
    """Rotation by editing the Secret: the operator's password stays, the server config
    file beside it follows (Redis reads requirepass from it, not from its command
    line), and Redis's pod template takes its digest, so Redis restarts with it."""
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    chosen = "f" * 64
    obj(kube, "secrets", SECRET)["data"]["password"] = base64.b64encode(chosen.encode()).decode()
    kube.writes.clear()
    rec.reconcile("ns/cb")
    assert kube.writes == [("apply", "secrets", SECRET), ("apply", "deployments", WORKLOAD)]
    assert digest(kube) == keyed(kube, chosen)
    config = obj(kube, "secrets", SECRET)["data"][AUTH_CONFIG_KEY]
    assert base64.b64decode(config).decode() == f'requirepass "{chosen}"\n'
    assert secret_password(obj(kube, "secrets", SECRET)) == chosen


def test_only_a_backend_that_may_hold_a_secret_reads_one() -> None:
    """Decision "The worker reads Secrets by name only": Secrets are not cached, so a
    backend pays a GET for its two Secret names only when it may hold one: a Redis
    provider, its first pass in this worker, or a pass after its spec changed (a
    consumer that left its tier); any other idle reconcile stays free of requests."""
    kube = FakeKube()
    lm_spec = {**REDIS_SPEC, "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"}}
    kube.put("cachebackends", status_backend(copy.deepcopy(lm_spec), uid=UID))
    stored = kube.objects[("cachebackends", "ns", "cb")]
    stored["metadata"]["generation"] = 1
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    assert ("get", "ns/cb-redis-auth-copy") in kube.calls, "the first pass reads them"
    assert stored["status"]["observedGeneration"] == 1
    kube.calls.clear()
    rec.reconcile("ns/cb")
    assert ("get", f"ns/{SECRET}") not in kube.calls
    assert ("get", "ns/cb-redis-auth-copy") not in kube.calls
    stored["metadata"]["generation"] = 2  # a spec change the worker has not published
    rec.reconcile("ns/cb")
    assert ("get", f"ns/{SECRET}") in kube.calls
    assert ("get", "ns/cb-redis-auth-copy") in kube.calls


def test_a_provider_switch_sheds_the_old_secret() -> None:
    kube = FakeKube()
    kube.put("cachebackends", status_backend(copy.deepcopy(REDIS_SPEC), uid=UID))
    rec = in_process_reconciler(kube, clock=lambda: NOW)
    rec.reconcile("ns/cb")
    assert ("secrets", "ns", SECRET) in kube.objects
    lm = {"provider": "LMCacheServer", "ownership": "Managed"}
    kube.objects[("cachebackends", "ns", "cb")]["spec"]["remoteStorage"] = lm
    rec.reconcile("ns/cb")
    assert ("secrets", "ns", SECRET) not in kube.objects
