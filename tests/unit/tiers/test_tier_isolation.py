"""A managed cache tier answers only its own engines: the pure renderers of the password
Secret and the NetworkPolicy, and the NetworkPolicy evaluator that judges them.

Rules (docs/decisions.md, "Managed tier isolation"):

* every managed Redis requires a password, from a Secret ``<backend>-redis-auth`` owned
  by the backend; its container reads it through a secretKeyRef env var referenced as
  ``$(VAR)`` in ``--requirepass``, never as a literal;
* a NetworkPolicy per managed provider workload (not Mooncake: host network) selects
  exactly the provider's pods and admits, on the data port only, the pods the
  engineSelector selects in the backend's namespace (every namespace with
  allowCrossNamespace); nothing else;
* ``inferencecache.io/skip-network-policy: "true"`` is the explicit opt-out.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from reconciler.steps.diff import needs_apply
from shared import constants as c
from shared.pod_wiring import OUTCOME_FAIL_OPEN, OUTCOME_INJECTED, WiringResult, wire_pod
from shared.runtime_adapters.base import InjectContext
from shared.storage_providers.base import AUTH_CONFIG_KEY, AUTH_CONFIG_PATH
from shared.storage_providers.lmcache_server import LMCACHE_SERVER_PORT
from shared.storage_providers.redis import REDIS_PORT
from shared.storage_providers.render import (
    ANNOTATION_COPY_OF,
    ANNOTATION_SHARED_WITH,
    ANNOTATION_SPEC_HASH,
    auth_secret_name,
    consent_revoked,
    copy_secret_name,
    is_credentials_copy,
    owned_secret_names,
    password_digest,
    render_managed_objects,
    secret_digest_key,
    secret_password,
    tier_password,
)
from tests import builders
from tests.builders import ENGINE_LABELS, by_kind, network_policies
from tests.builders import isolated_backend as backend
from tests.network_policy import PodRef, ingress_allowed, label_selector_matches

NS = "team-a"
PASSWORD = "5" * 64


def fixed_password() -> str:
    return PASSWORD


def provider_pod(objs: list[dict[str, Any]]) -> PodRef:
    """A pod of the rendered workload, as the workload's template labels it."""
    workload = next(o for o in objs if o["kind"] in ("Deployment", "StatefulSet"))
    return PodRef(NS, workload["spec"]["template"]["metadata"]["labels"])


ENGINE = PodRef(NS, {**ENGINE_LABELS, "pod-template-hash": "abc"})
FOREIGN_SAME_NS = PodRef(NS, {"app": "someone-else"})
ENGINE_OTHER_NS = PodRef("team-b", dict(ENGINE_LABELS))
FOREIGN_OTHER_NS = PodRef("team-b", {"app": "someone-else"})


# ------------------------------------------------------------------ password Secret


def test_a_managed_redis_gets_a_random_password_secret_owned_by_the_backend() -> None:
    objs = render_managed_objects(backend(c.PROVIDER_REDIS))
    secret = objs[0]
    assert secret["kind"] == "Secret", "the Secret comes before the pods that read it"
    assert secret["metadata"]["name"] == "cache-redis-auth" == auth_secret_name("cache")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert secret["metadata"]["ownerReferences"][0]["controller"] is True
    password = secret_password(secret)
    assert password is not None
    assert len(password) == 64
    int(password, 16)  # hex: safe in a Redis config word and a JSON string
    other = secret_password(render_managed_objects(backend(c.PROVIDER_REDIS))[0])
    assert other != password, "drawn at random, not derived from the backend"


def test_the_live_password_is_kept_and_the_data_stays_out_of_the_spec_hash() -> None:
    cb = backend(c.PROVIDER_REDIS)
    first = by_kind(render_managed_objects(cb, generate_password=fixed_password))
    live = {("Secret", "cache-redis-auth"): first["Secret"]}
    again = by_kind(render_managed_objects(cb, live))  # no generator needed: the live one is kept
    assert secret_password(again["Secret"]) == PASSWORD
    assert again == first
    # A different password changes the Secret's data but not its hash: the hash is of
    # what is rendered deterministically.
    other = by_kind(render_managed_objects(cb, generate_password=lambda: "6" * 64))
    hashes = [o["Secret"]["metadata"]["annotations"][ANNOTATION_SPEC_HASH] for o in (first, other)]
    assert hashes[0] == hashes[1]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({}, id="key removed"),
        pytest.param({"password": ""}, id="emptied"),
        pytest.param({"password": "not base64!"}, id="undecodable"),
    ],
)
def test_a_secret_without_a_usable_password_gets_a_new_one_and_is_reapplied(
    data: dict[str, str],
) -> None:
    cb = backend(c.PROVIDER_REDIS)
    rendered = by_kind(render_managed_objects(cb, generate_password=fixed_password))["Secret"]
    broken = {**rendered, "data": data}
    desired = by_kind(render_managed_objects(cb, {("Secret", "cache-redis-auth"): broken}))[
        "Secret"
    ]
    assert secret_password(desired) not in (None, "", PASSWORD)
    assert needs_apply(desired, broken)


def test_an_unchanged_secret_is_not_reapplied() -> None:
    cb = backend(c.PROVIDER_REDIS)
    secret = by_kind(render_managed_objects(cb, generate_password=fixed_password))["Secret"]
    live = json.loads(json.dumps(secret))
    live["metadata"]["resourceVersion"] = "7"
    assert not needs_apply(
        by_kind(render_managed_objects(cb, {("Secret", secret["metadata"]["name"]): live}))[
            "Secret"
        ],
        live,
    )


def test_redis_requires_the_password_from_a_config_file_never_the_command_line() -> None:
    """Decision "No secret on a command line": the managed Redis reads ``requirepass``
    from a config file mounted from its Secret; its args hold neither the password nor
    a $(VAR) the kubelet would expand into argv."""
    objs = by_kind(
        render_managed_objects(backend(c.PROVIDER_REDIS), generate_password=fixed_password)
    )
    template = objs["Deployment"]["spec"]["template"]
    container = template["spec"]["containers"][0]
    args = container["args"]
    assert args[:2] == ["redis-server", AUTH_CONFIG_PATH]
    assert "--requirepass" not in args
    assert not any("$(" in a for a in args)
    assert "--protected-mode" not in args, "protected mode stays on as a second line"
    assert "env" not in container
    auth_mount = {"name": "auth-config", "mountPath": "/etc/inferencecache/auth", "readOnly": True}
    assert auth_mount in container["volumeMounts"]
    auth_volume = {
        "name": "auth-config",
        "secret": {
            "secretName": "cache-redis-auth",
            "items": [{"key": AUTH_CONFIG_KEY, "path": AUTH_CONFIG_KEY}],
            "defaultMode": 0o444,
        },
    }
    assert auth_volume in template["spec"]["volumes"]
    config = base64.b64decode(objs["Secret"]["data"][AUTH_CONFIG_KEY]).decode()
    assert config == f'requirepass "{PASSWORD}"\n'
    text = json.dumps(objs["Deployment"])
    assert PASSWORD not in text
    assert base64.b64encode(PASSWORD.encode()).decode() not in text


def test_a_new_password_rolls_the_redis_pods() -> None:
    """The pod template carries a digest of the password: a re-created Secret (rotation)
    changes the template, so Redis restarts with it and the cache-server cascade rolls
    the engines, which then read the new one."""
    cb = backend(c.PROVIDER_REDIS)
    a = by_kind(render_managed_objects(cb, generate_password=fixed_password))["Deployment"]
    b = by_kind(render_managed_objects(cb, generate_password=lambda: "6" * 64))["Deployment"]
    digest = a["spec"]["template"]["metadata"]["annotations"][c.ANNOTATION_AUTH_DIGEST]
    assert digest == password_digest(PASSWORD, PASSWORD) != PASSWORD  # fixed key too
    assert PASSWORD not in digest
    assert needs_apply(b, a)


def test_the_auth_digest_is_keyed_by_a_random_key_kept_in_the_secret() -> None:
    """The template's digest is an HMAC under a random key from the Secret: the same
    password under another key digests differently, so the annotation alone cannot test
    guesses of a password; the key stays with the password (not in the copy)."""
    cb = backend(c.PROVIDER_REDIS)
    drawn = iter([PASSWORD, "a" * 64])
    objs = by_kind(render_managed_objects(cb, generate_password=lambda: next(drawn)))
    assert secret_digest_key(objs["Secret"]) == "a" * 64
    digest = objs["Deployment"]["spec"]["template"]["metadata"]["annotations"][
        c.ANNOTATION_AUTH_DIGEST
    ]
    assert digest == password_digest(PASSWORD, "a" * 64) != password_digest(PASSWORD, "b" * 64)
    assert len(digest) == 64, "the whole HMAC-SHA256"


def secret_with(data: dict[str, str], **annotations: str) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"annotations": annotations}, "data": encoded}


def test_a_copy_is_told_from_a_tiers_own_secret() -> None:
    """Rule "No managed tier adopts a copy": marked, or (from before the marker) a
    password without the server config a tier's own Secret always holds."""
    own = secret_with({"password": "p", AUTH_CONFIG_KEY: "requirepass p"})
    assert not is_credentials_copy(own)
    assert not is_credentials_copy(None)
    assert is_credentials_copy(secret_with({"password": "p"}))
    marked = secret_with({"password": "p", AUTH_CONFIG_KEY: "x"}, **{ANNOTATION_COPY_OF: "a/b"})
    assert is_credentials_copy(marked)


def test_copies_have_their_own_name_and_both_names_are_read() -> None:
    assert copy_secret_name("cache") == "cache-redis-auth-copy" != auth_secret_name("cache")
    assert owned_secret_names("cache") == ("cache-redis-auth", "cache-redis-auth-copy")
    long_name = "x" * 63
    assert copy_secret_name(long_name) != auth_secret_name(long_name)
    assert len(copy_secret_name(long_name)) <= 63


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({ANNOTATION_COPY_OF: "team-b/cache-redis-auth"}, id="marked"),
        pytest.param({}, id="unmarked, copy-shaped"),
    ],
)
def test_a_managed_redis_never_takes_its_password_from_a_copy(
    annotations: dict[str, str],
) -> None:
    cb = backend(c.PROVIDER_REDIS)
    data = {"password": "the-owners"}
    if annotations:
        data[AUTH_CONFIG_KEY] = "requirepass the-owners"
    live = {("Secret", "cache-redis-auth"): secret_with(data, **annotations)}
    assert tier_password(cb, live, fixed_password).password == PASSWORD


def test_revoking_consent_is_a_namespace_leaving_the_record() -> None:
    """Rule "Revoking consent rotates the password"."""
    assert consent_revoked(frozenset({"b"}), frozenset())
    assert consent_revoked(frozenset({"b", "c"}), frozenset({"c", "d"}))
    assert not consent_revoked(frozenset({"b"}), frozenset({"b", "c"})), "widening"
    assert not consent_revoked(frozenset(), frozenset())
    assert not consent_revoked(None, frozenset()), "no record (upgrade): not a revocation"


def test_the_tier_password_follows_the_record_of_consent() -> None:
    cb = backend(c.PROVIDER_REDIS)  # consents to no other namespace
    kept = {"password": "p" * 64, AUTH_CONFIG_KEY: "x", "digest-key": "k" * 64}
    for record, rotated in (("team-b", True), ("", False), (None, False)):
        annotations = {} if record is None else {ANNOTATION_SHARED_WITH: record}
        live = {("Secret", "cache-redis-auth"): secret_with(kept, **annotations)}
        tier = tier_password(cb, live, fixed_password)
        assert (tier.password == PASSWORD) is rotated, record
        assert tier.digest_key == "k" * 64, "the key outlives a rotation"
        assert tier.shared_with == frozenset()
    secret = render_managed_objects(cb)[0]
    assert secret["metadata"]["annotations"][ANNOTATION_SHARED_WITH] == ""


def test_only_redis_gets_a_password() -> None:
    for provider in (c.PROVIDER_LMCACHE_SERVER, c.PROVIDER_MOONCAKE):
        objs = render_managed_objects(backend(provider))
        assert "Secret" not in by_kind(objs), provider
        ctr = by_kind(objs)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
        assert not [e for e in ctr.get("env") or [] if "valueFrom" in e], provider


# ------------------------------------------------------------------ NetworkPolicy


@pytest.mark.parametrize(
    ("provider", "port"),
    [(c.PROVIDER_REDIS, REDIS_PORT), (c.PROVIDER_LMCACHE_SERVER, LMCACHE_SERVER_PORT)],
)
def test_the_policy_admits_only_the_engines_on_the_data_port(provider: str, port: int) -> None:
    objs = render_managed_objects(backend(provider))
    pols = network_policies(objs)
    assert len(pols) == 1
    target = provider_pod(objs)
    assert ingress_allowed(pols, target, ENGINE, port)
    assert not ingress_allowed(pols, target, FOREIGN_SAME_NS, port)
    assert not ingress_allowed(pols, target, ENGINE_OTHER_NS, port)
    assert not ingress_allowed(pols, target, FOREIGN_OTHER_NS, port)
    assert not ingress_allowed(pols, target, ENGINE, port + 1), "the data port only"


def test_the_policy_selects_exactly_the_provider_pods() -> None:
    objs = render_managed_objects(backend(c.PROVIDER_REDIS))
    (policy,) = network_policies(objs)
    workload = by_kind(objs)["Deployment"]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert (
        policy["spec"]["podSelector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
    )
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # Pods of another backend's Redis, and the engines themselves, are not isolated by it.
    other = by_kind(
        render_managed_objects(
            backend(c.PROVIDER_REDIS).model_copy(
                update={
                    "metadata": backend(c.PROVIDER_REDIS).metadata.model_copy(
                        update={"name": "other"}
                    )
                }
            )
        )
    )["Deployment"]
    assert not label_selector_matches(
        policy["spec"]["podSelector"], other["spec"]["template"]["metadata"]["labels"]
    )
    assert not label_selector_matches(policy["spec"]["podSelector"], ENGINE.labels)


def test_allow_cross_namespace_on_the_owner_admits_no_other_namespace() -> None:
    """Decision "Cross-namespace consumers need the owner's consent": the flag is a
    consumer's acknowledgement; on the owner it opens nothing, and no peer ever has an
    empty namespaceSelector."""
    objs = render_managed_objects(backend(c.PROVIDER_LMCACHE_SERVER, allowCrossNamespace=True))
    pols, target = network_policies(objs), provider_pod(objs)
    assert ingress_allowed(pols, target, ENGINE, LMCACHE_SERVER_PORT)
    assert not ingress_allowed(pols, target, ENGINE_OTHER_NS, LMCACHE_SERVER_PORT)
    assert not ingress_allowed(pols, target, FOREIGN_SAME_NS, LMCACHE_SERVER_PORT)
    assert not ingress_allowed(pols, target, FOREIGN_OTHER_NS, LMCACHE_SERVER_PORT)
    assert '"namespaceSelector": {}' not in json.dumps(pols)


def test_an_empty_engine_selector_admits_nobody() -> None:
    """The Pod webhook never matches an empty selector; a peer with an empty podSelector
    would admit every pod of the namespace instead."""
    objs = render_managed_objects(backend(c.PROVIDER_REDIS, selector={}))
    pols, target = network_policies(objs), provider_pod(objs)
    assert pols[0]["spec"]["ingress"] == []
    for source in (ENGINE, FOREIGN_SAME_NS, ENGINE_OTHER_NS):
        assert not ingress_allowed(pols, target, source, REDIS_PORT)


def test_mooncake_gets_no_policy_its_master_is_on_the_host_network() -> None:
    assert network_policies(render_managed_objects(backend(c.PROVIDER_MOONCAKE))) == []


@pytest.mark.parametrize(
    ("value", "skipped"), [("true", True), ("TRUE", True), ("false", False), ("", False)]
)
def test_the_opt_out_annotation_drops_the_policy_and_only_the_policy(
    value: str, skipped: bool
) -> None:
    objs = render_managed_objects(
        backend(c.PROVIDER_REDIS, annotations={c.ANNOTATION_SKIP_NETWORK_POLICY: value})
    )
    assert (network_policies(objs) == []) is skipped
    assert "Secret" in by_kind(objs), "the password stays: the opt-out is about the network"


def test_the_policy_is_converged_on_drift() -> None:
    (policy,) = network_policies(render_managed_objects(backend(c.PROVIDER_REDIS)))
    live = json.loads(json.dumps(policy))
    assert not needs_apply(policy, live)
    live["spec"]["ingress"][0]["from"] = [{"podSelector": {}}]  # someone opened it up
    assert needs_apply(policy, live)


# ------------------------------------------------------------------ the evaluator


def test_evaluator_follows_the_networkpolicy_semantics() -> None:
    target = PodRef("ns", {"app": "db"})
    allow_all_from: dict[str, Any] = {
        "metadata": {"namespace": "ns"},
        "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 1}]}]},
    }
    deny_all = {
        "metadata": {"namespace": "ns"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    other_ns_policy = {"metadata": {"namespace": "elsewhere"}, "spec": {"podSelector": {}}}
    src = PodRef("x", {"a": "b"})
    assert ingress_allowed([], target, src, 1), "no policy: not isolated"
    assert ingress_allowed([other_ns_policy], target, src, 1), (
        "a policy isolates its namespace only"
    )
    assert not ingress_allowed([deny_all], target, src, 1)
    assert ingress_allowed([allow_all_from], target, src, 1), "no from: every source"
    assert ingress_allowed([deny_all, allow_all_from], target, src, 1), "policies are a union"
    ns_only = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"t": "1"}}}]}],
        },
    }
    assert ingress_allowed([ns_only], target, PodRef("x", {}, {"t": "1"}), 5)
    assert not ingress_allowed([ns_only], target, PodRef("ns", {}, {}), 5)
    expressions = {
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gold"]},
            {"key": "banned", "operator": "DoesNotExist"},
        ]
    }
    assert label_selector_matches(expressions, {"tier": "gold"})
    assert not label_selector_matches(expressions, {"tier": "gold", "banned": "1"})
    assert not label_selector_matches(expressions, {"tier": "silver"})


# ------------------------------------------------------------------ engine wiring

SGLANG = {
    "name": "sglang",
    "image": "lmsysorg/sglang:v0.5.3",
    "command": ["python3", "-m", "sglang.launch_server"],
    "args": ["--model-path", "Qwen/Qwen3-8B"],
}
REDIS_ENDPOINT = "cache-redis.team-a.svc:6379"


def sglang_backend(remote: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return builders.backend(runtime=c.RUNTIME_SGLANG, type_=c.TYPE_LMCACHE, remote=remote, **kwargs)


def worker_of(result: WiringResult) -> dict[str, Any]:
    assert result.outcome == OUTCOME_INJECTED, result.message
    return next(i for i in result.pod["spec"]["initContainers"] if i["name"] == "lmcache-mp-worker")


def l2_adapter(worker: dict[str, Any]) -> dict[str, Any]:
    args = worker["args"]
    config: dict[str, Any] = json.loads(args[args.index("--l2-adapter") + 1])
    return config


def test_the_mp_worker_reads_the_managed_redis_password_through_a_secret_key_ref() -> None:
    """LMCache's resp L2 adapter (0.4.7 and 0.5.6) reads LMCACHE_RESP_PASSWORD from its
    environment when the --l2-adapter JSON has no "password": the worker's secretKeyRef
    env var, so neither the pod spec nor the worker's argv ever holds the value."""
    cb = sglang_backend(builders.managed(c.PROVIDER_REDIS), status_endpoint=REDIS_ENDPOINT)
    worker = worker_of(wire_pod(builders.pod(SGLANG), [cb], InjectContext()))
    assert l2_adapter(worker) == {
        "type": "resp",
        "host": "cache-redis.team-a.svc",
        "port": 6379,
    }
    assert not any("$(" in a for a in worker["args"])
    env = {e["name"]: e for e in worker["env"]}
    assert env["LMCACHE_RESP_PASSWORD"] == {
        "name": "LMCACHE_RESP_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "cache-redis-auth", "key": "password"}},
    }
    assert auth_secret_name("cache") == "cache-redis-auth", "the name the reconciler renders"


def test_no_password_reference_before_the_endpoint_is_published() -> None:
    """The gate endpoints already have: a pod admitted before the backend publishes
    status.endpoint (so before its Secret exists) is not wired at all (fail-open)."""
    cb = sglang_backend(builders.managed(c.PROVIDER_REDIS))
    result = wire_pod(builders.pod(SGLANG), [cb], InjectContext())
    assert result.outcome == OUTCOME_FAIL_OPEN
    assert "secretKeyRef" not in json.dumps(result.pod)


def test_an_external_redis_is_wired_without_credentials() -> None:
    """External tiers carry no credentials from us."""
    remote = builders.external(c.PROVIDER_REDIS, "redis.example.com:6379")
    cb = sglang_backend(remote, namespace="team-b", allowCrossNamespace=True)
    p = builders.pod(SGLANG, namespace="team-b")
    worker = worker_of(wire_pod(p, [cb], InjectContext()))
    assert "password" not in l2_adapter(worker)
    assert "secretKeyRef" not in json.dumps(worker)


def test_a_cross_namespace_consumer_of_a_managed_redis_reads_its_own_copy() -> None:
    """Decision "Cross-namespace consumers need the owner's consent": a pod cannot
    reference another namespace's Secret, so the worker reads the consumer's own copy
    (kept by the reconciler once the owner consented), through an optional reference
    that never keeps the pod from starting, and never through its args."""
    remote = builders.external(c.PROVIDER_REDIS, "cache-redis.team-a.svc:6379")
    cb = sglang_backend(remote, namespace="team-b", allowCrossNamespace=True)
    p = builders.pod(SGLANG, namespace="team-b")
    worker = worker_of(wire_pod(p, [cb], InjectContext()))
    assert "password" not in l2_adapter(worker)
    env = {e["name"]: e for e in worker["env"]}
    assert env["LMCACHE_RESP_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "cache-redis-auth-copy",  # never the name of a managed Redis's own Secret
        "key": "password",
        "optional": True,
    }
