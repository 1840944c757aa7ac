"""On the real API server, with the real `icache dispatcher` and `icache worker` (as its
ServiceAccount, so the RBAC is proven too): a cross-namespace consumer's copy of a
managed Redis's password has its own name and a marker, and follows consent.

* The copy is ``<consumer>-redis-auth-copy``, annotated with the Secret it copies.
* A consumer that leaves the tier (host-only now) loses its copy within a resync.
* A copy made under the old name (the consumer's managed-Redis name) is renamed.
* One left by a backend that had left its tier before the upgrade goes on the upgraded
  worker's first pass.
* A managed Redis never takes its password from a copy, marked or old-style.
* Withdrawing consent rotates the owner's password (and rolls its Redis); the copy goes.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kubeio import client as k
from shared import constants as c
from shared.api.models import CacheBackend
from shared.storage_providers.base import AUTH_CONFIG_KEY
from shared.storage_providers.registry import select_provider
from shared.storage_providers.render import (
    ANNOTATION_COPY_OF,
    ANNOTATION_SHARED_WITH,
    password_digest,
    render_credentials_copy,
    secret_digest_key,
    secret_password,
)
from tests.e2e.conftest import Cluster, Proc, Stack, poll

NO_GATE = {c.ANNOTATION_REQUIRE_KV_EVENTS: "false"}
OWNER_SPEC: dict[str, Any] = {
    "runtime": "SGLang",
    "engineSelector": {"matchLabels": {"app": "sglang"}},
    "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
}
OWNER_SECRET = "chat-redis-auth"
COPY = "shared-redis-auth-copy"
OLD_COPY = "shared-redis-auth"
# The longest a copy may outlive what it follows: the dispatcher's resync (the worker
# never watches Secrets), with the margin of a second pass.
RESYNC_BOUND = 60


def consumer_spec(owner_ns: str) -> dict[str, Any]:
    return {
        "runtime": "SGLang",
        "engineSelector": {"matchLabels": {"app": "sglang-b"}},
        "allowCrossNamespace": True,
        "remoteStorage": {
            "provider": "Redis",
            "ownership": "External",
            "endpoint": f"chat-redis.{owner_ns}.svc:6379",
        },
    }


def get(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    return cluster.kube.get_or_none(k.SECRETS, ns, name)


def wait_secret(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return poll(lambda: get(cluster, ns, name), timeout=RESYNC_BOUND, what=f"Secret {ns}/{name}")


def wait_gone(cluster: Cluster, ns: str, name: str, what: str) -> None:
    poll(lambda: get(cluster, ns, name) is None, timeout=RESYNC_BOUND, what=what)


def redis_digest(cluster: Cluster, ns: str) -> str | None:
    dep = cluster.kube.get_or_none(k.DEPLOYMENTS, ns, "chat-redis") or {}
    template = (dep.get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_AUTH_DIGEST)


def reconciles(worker: Proc, key: str) -> list[int]:
    """The writes of each pass over ``key`` the worker has logged so far (its trace
    logs the end of every pass; the pass's writes, when any, follow it)."""
    out: list[int] = []
    for line in worker.log().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("key") != key:
            continue
        if record.get("msg") == "reconcile end":
            out.append(0)
        elif record.get("msg") == "reconciled" and out:
            out[-1] = int(record.get("writes", -1))
    return out


def owner_and_consumer(cluster: Cluster) -> tuple[str, str]:
    team_a = cluster.namespace()
    team_b = cluster.namespace()
    consent = {**NO_GATE, c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: team_b}
    cluster.create_cb(team_a, "chat", OWNER_SPEC, consent)
    cluster.create_cb(team_b, "shared", consumer_spec(team_a), NO_GATE)
    return team_a, team_b


def test_the_copy_is_marked_and_goes_when_the_consumer_leaves_the_tier(
    cluster: Cluster, stack: Stack
) -> None:
    """Rule "Copies follow consent": the copy has its own name and names its source;
    once the consumer is host-only (no provider left), its copy is deleted within a
    resync; and when it later runs a managed Redis of its own, that Redis draws its own
    password."""
    stack.start_dispatcher()
    stack.start_worker()
    team_a, team_b = owner_and_consumer(cluster)
    copy_ = wait_secret(cluster, team_b, COPY)
    owner_secret = cluster.kube.get(k.SECRETS, team_a, OWNER_SECRET)
    assert secret_password(copy_) == secret_password(owner_secret)
    assert copy_["metadata"]["annotations"][ANNOTATION_COPY_OF] == f"{team_a}/{OWNER_SECRET}"
    assert set(copy_["data"]) == {"password"}, "the owner's config and digest key stay home"
    assert get(cluster, team_b, OLD_COPY) is None, "nothing under a managed tier's name"

    cluster.patch_cb(team_b, "shared", {"spec": {"remoteStorage": None}})
    wait_gone(cluster, team_b, COPY, "the copy of a consumer that left the tier to go")

    cluster.patch_cb(team_b, "shared", {"spec": {"remoteStorage": OWNER_SPEC["remoteStorage"]}})
    own = wait_secret(cluster, team_b, OLD_COPY)
    assert secret_password(own) not in (None, secret_password(owner_secret))
    assert ANNOTATION_COPY_OF not in (own["metadata"].get("annotations") or {})


def planted(cb: dict[str, Any], source: str, password: str) -> dict[str, Any]:
    """A copy as the worker renders it for ``cb`` (owned by it, labelled for it)."""
    backend = CacheBackend.model_validate(cb)
    secret = render_credentials_copy(backend, select_provider(c.PROVIDER_REDIS), password, source)
    secret["metadata"].pop("namespace")
    return secret


def test_an_old_name_copy_is_renamed_and_no_managed_tier_adopts_a_copy(
    cluster: Cluster, stack: Stack
) -> None:
    """Migration: a copy left under the old name (the consumer's managed-Redis name,
    password only, owned by the consumer) is replaced by a marked copy under the new
    name and deleted. A managed Redis whose password Secret name holds a marked copy
    draws its own password and drops the marker."""
    team_a, team_b = owner_and_consumer(cluster)
    consumer = cluster.cb(team_b, "shared")
    old = planted(consumer, f"{team_a}/{OWNER_SECRET}", "old-style-copy")
    old["metadata"]["name"] = OLD_COPY
    del old["metadata"]["annotations"][ANNOTATION_COPY_OF]
    cluster.kube.create(k.SECRETS, team_b, old)

    team_c = cluster.namespace()
    cluster.create_cb(team_c, "chat", OWNER_SPEC, NO_GATE)
    marked = planted(cluster.cb(team_c, "chat"), f"{team_a}/{OWNER_SECRET}", "someone-elses")
    marked["metadata"]["name"] = OWNER_SECRET
    marked["data"][AUTH_CONFIG_KEY] = base64.b64encode(b'requirepass "someone-elses"\n').decode()
    cluster.kube.create(k.SECRETS, team_c, marked)

    stack.start_dispatcher()
    worker = stack.start_worker()
    renamed = wait_secret(cluster, team_b, COPY)
    wait_gone(cluster, team_b, OLD_COPY, "the old-name copy to go")
    owner_secret = cluster.kube.get(k.SECRETS, team_a, OWNER_SECRET)
    assert secret_password(renamed) == secret_password(owner_secret)
    assert renamed["metadata"]["annotations"][ANNOTATION_COPY_OF] == f"{team_a}/{OWNER_SECRET}"

    def own_password() -> dict[str, Any] | None:
        secret = get(cluster, team_c, OWNER_SECRET)
        annotations = (secret or {}).get("metadata", {}).get("annotations") or {}
        return secret if ANNOTATION_SHARED_WITH in annotations else None

    own = poll(own_password, timeout=RESYNC_BOUND, what="team C's Redis to draw its password")
    assert secret_password(own) not in (None, "someone-elses")
    digest = password_digest(str(secret_password(own)), str(secret_digest_key(own)))
    poll(
        lambda: redis_digest(cluster, team_c) == digest,
        timeout=RESYNC_BOUND,
        what="team C's Redis to run on its own password",
    )
    # Once its own, the password stays: later passes (the resync) write nothing.
    key = f"{team_c}/chat"
    seen = len(reconciles(worker, key))
    later = poll(
        lambda: (
            reconciles(worker, key)[seen:] if len(reconciles(worker, key)) >= seen + 3 else None
        ),
        timeout=RESYNC_BOUND,
        what="three more passes over team C's backend",
    )
    assert later[1:] == [0] * len(later[1:]), "a tier that keeps rotating"
    assert secret_password(cluster.kube.get(k.SECRETS, team_c, OWNER_SECRET)) == (
        secret_password(own)
    )


def test_withdrawing_consent_rotates_the_owners_password_and_removes_the_copy(
    cluster: Cluster, stack: Stack
) -> None:
    """Rule "Revoking consent rotates the password": the owner's password changes (its
    Redis's template digest with it, so Redis rolls and the cascade rolls the owner's
    engines), the consumer's copy goes within a resync; widening consent rotates nothing."""
    stack.start_dispatcher()
    stack.start_worker()
    team_a, team_b = owner_and_consumer(cluster)
    wait_secret(cluster, team_b, COPY)
    first = cluster.kube.get(k.SECRETS, team_a, OWNER_SECRET)
    assert first["metadata"]["annotations"][ANNOTATION_SHARED_WITH] == team_b
    digest = redis_digest(cluster, team_a)
    assert digest == password_digest(str(secret_password(first)), str(secret_digest_key(first)))

    team_x = cluster.namespace()
    consent = c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES
    cluster.patch_cb(team_a, "chat", {"metadata": {"annotations": {consent: f"{team_b},{team_x}"}}})
    poll(
        lambda: (
            (
                (get(cluster, team_a, OWNER_SECRET) or {})
                .get("metadata", {})
                .get("annotations", {})
            ).get(ANNOTATION_SHARED_WITH)
            == ",".join(sorted((team_b, team_x)))
        ),
        timeout=RESYNC_BOUND,
        what="the widened consent on record",
    )
    widened = cluster.kube.get(k.SECRETS, team_a, OWNER_SECRET)
    assert secret_password(widened) == secret_password(first), "widening rotates nothing"

    cluster.patch_cb(team_a, "chat", {"metadata": {"annotations": {consent: team_x}}})
    rotated = poll(
        lambda: (
            s
            if secret_password(s := get(cluster, team_a, OWNER_SECRET))
            not in (None, secret_password(first))
            else None
        ),
        timeout=RESYNC_BOUND,
        what="the owner's password to rotate",
    )
    want = password_digest(str(secret_password(rotated)), str(secret_digest_key(rotated)))
    poll(
        lambda: redis_digest(cluster, team_a) == want,
        timeout=RESYNC_BOUND,
        what="the owner's Redis template to carry the new digest",
    )
    assert want != digest
    wait_gone(cluster, team_b, COPY, "the copy of a consumer no longer consented to go")


def test_an_old_name_copy_of_a_consumer_that_left_before_the_upgrade_goes(
    cluster: Cluster, stack: Stack
) -> None:
    """Migration, the upgrade sweep: a backend that had left its tier (host-only) before
    the upgrade, whose status is published for its current spec (nothing left to say it
    holds a Secret), still has its old-name copy read and deleted on the first pass of
    the upgraded worker."""
    ns = cluster.namespace()
    cb = cluster.create_cb(ns, "shared", {"runtime": "SGLang"}, NO_GATE)
    generation = cb["metadata"]["generation"]
    cluster.patch_cb(ns, "shared", {"status": {"observedGeneration": generation}}, status=True)
    old = planted(cb, f"{ns}-gone/{OWNER_SECRET}", "the-owners-password")
    old["metadata"]["name"] = OLD_COPY
    del old["metadata"]["annotations"][ANNOTATION_COPY_OF]
    cluster.kube.create(k.SECRETS, ns, old)

    stack.start_dispatcher()
    stack.start_worker()
    wait_gone(cluster, ns, OLD_COPY, "the old-name copy of a backend off Redis to go")
