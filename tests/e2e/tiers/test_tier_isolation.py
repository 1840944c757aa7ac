"""On the real API server, with the real `icache dispatcher`, `icache worker` (as its
ServiceAccount, so the RBAC is proven too) and `icache webhook`: a managed cache tier
answers only its own engines.

* Managed Redis and Managed LMCacheServer backends each get a NetworkPolicy that
  selects the provider's pods and, evaluated from the object (no network plugin
  enforces it here; ``tests.network_policy``), admits an engine pod, refuses a foreign
  pod of the namespace and a pod of another namespace.
* The Redis gets a password Secret owned by the backend; a real Redis-compatible server
  started with the Deployment's rendered arguments (``$(VAR)`` references expanded and
  its Secret volume projected as the kubelet would), refuses an unauthenticated client
  and accepts the credentials the webhook wired into the SGLang MP worker — which
  carries only a secretKeyRef env var LMCache reads, as the Redis pod template carries
  only a Secret volume: no literal password in a spec, none on a command line.
* Drift is repaired, a foreign object with the policy's name is left alone
  (NameConflict), the opt-out annotation works and is validated, and a backend whose
  Secret and policy are missing (as one from before this change) gets them back.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeio import client as k
from reconciler.steps.exact_drift import normalized_policy_spec
from shared import constants as c
from shared.api.models import CacheBackend
from shared.storage_providers.base import AUTH_CONFIG_PATH
from shared.storage_providers.render import (
    ANNOTATION_COPY_OF,
    password_digest,
    render_managed_objects,
    secret_digest_key,
    secret_password,
)
from tests.e2e.conftest import Cluster, Stack, condition, poll
from tests.e2e.workloads import pod_ready, pods_of, rolled_out, wait_rolled_out
from tests.harness.redis_server import RedisServer
from tests.network_policy import PodRef, applies_to_ingress, ingress_allowed
from tests.webhook_process import TEST_NAMESPACE_LABEL, WebhookProcess, registered, run_webhook

NO_GATE = {c.ANNOTATION_REQUIRE_KV_EVENTS: "false"}
REDIS_ENGINES = {"app": "sglang"}
LM_ENGINES = {"app": "vllm"}
REDIS_SPEC = {
    "runtime": "SGLang",
    "engineSelector": {"matchLabels": REDIS_ENGINES},
    "remoteStorage": {"provider": "Redis", "ownership": "Managed"},
}
LM_SPEC = {
    "runtime": "VLLM",
    "engineSelector": {"matchLabels": LM_ENGINES},
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
}
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@pytest.fixture
def webhook_suffix(cluster: Cluster) -> Iterator[str]:
    """The real `icache webhook`, registered (Pod wiring and CacheBackend admission) for
    the namespaces labelled with the suffix this yields."""
    suffix = f"isolation-{uuid.uuid4().hex[:6]}"
    api = cluster.cp.api_client()
    hook: WebhookProcess
    try:
        with run_webhook(cluster.cp.kubeconfig_path) as hook, registered(api, hook, suffix):
            yield suffix
    finally:
        api.close()


@pytest.fixture
def wired(cluster: Cluster, webhook_suffix: str) -> str:
    """A namespace the webhook serves."""
    return cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})


# ------------------------------------------------------------------ helpers


def get(cluster: Cluster, res: k.Resource, ns: str, name: str) -> dict[str, Any] | None:
    return cluster.kube.get_or_none(res, ns, name)


def wait_object(cluster: Cluster, res: k.Resource, ns: str, name: str) -> dict[str, Any]:
    return poll(lambda: get(cluster, res, ns, name), timeout=30, what=f"{res.kind} {ns}/{name}")


def policies(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(cluster.kube.list(k.NETWORKPOLICIES, ns).get("items") or [])


def pod_ref(ns: str, labels: dict[str, str]) -> PodRef:
    return PodRef(ns, labels, {"kubernetes.io/metadata.name": ns})


def provider_pod(cluster: Cluster, ns: str, workload: str) -> PodRef:
    dep = wait_object(cluster, k.DEPLOYMENTS, ns, workload)
    return pod_ref(ns, dep["spec"]["template"]["metadata"]["labels"])


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of a command/args string (defined variables)."""
    return VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)


def secret_env(container: dict[str, Any], cluster: Cluster, ns: str) -> dict[str, str]:
    """The container's env as the kubelet resolves it: every secretKeyRef read."""
    out: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            out[var["name"]] = var["value"]
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        secret = cluster.kube.get(k.SECRETS, ns, ref["name"])
        out[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    return out


def mount_secret_volumes(
    pod_spec: dict[str, Any],
    container: dict[str, Any],
    args: list[str],
    cluster: Cluster,
    ns: str,
    root: Path,
) -> list[str]:
    """The container's Secret volumes written under ``root`` as the kubelet projects
    them, and ``args`` with each mount path replaced by where it now lives (the
    scratch emptyDirs are not Secrets: the server runs in its working directory)."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    out = list(args)
    for mount in container.get("volumeMounts") or []:
        if "secret" not in volumes[mount["name"]]:
            continue
        source = volumes[mount["name"]]["secret"]
        secret = cluster.kube.get(k.SECRETS, ns, source["secretName"])
        target = root / mount["name"]
        target.mkdir()
        for item in source["items"]:
            (target / item["path"]).write_bytes(base64.b64decode(secret["data"][item["key"]]))
        out = [a.replace(mount["mountPath"], str(target)) for a in out]
    return out


def spec_of(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if obj is None else dict(obj["spec"])


def template_digest(cluster: Cluster, ns: str) -> str | None:
    dep = get(cluster, k.DEPLOYMENTS, ns, "chat-redis") or {}
    template = (dep.get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_AUTH_DIGEST)


def keyed_digest(cluster: Cluster, ns: str) -> str:
    """The digest of the password Secret's password under the key it holds beside it."""
    secret = cluster.kube.get(k.SECRETS, ns, "chat-redis-auth")
    return password_digest(str(secret_password(secret)), str(secret_digest_key(secret)))


def assert_no_literal(obj: dict[str, Any], password: str) -> None:
    text = json.dumps(obj)
    assert password not in text
    assert base64.b64encode(password.encode()).decode() not in text


def resp(port: int, *commands: list[str]) -> list[bytes]:
    """Send RESP commands on one connection; the first line of each reply."""
    replies = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        reader = sock.makefile("rb")
        for command in commands:
            parts = [f"*{len(command)}\r\n".encode()]
            for word in command:
                data = word.encode()
                parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
            sock.sendall(b"".join(parts))
            replies.append(reader.readline().rstrip())
    return replies


def sglang_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(REDIS_ENGINES)},
        "spec": {
            "containers": [
                {
                    "name": "sglang",
                    "image": "lmsysorg/sglang:v0.5.3",
                    "command": ["python3", "-m", "sglang.launch_server"],
                    "args": ["--model-path", "Qwen/Qwen3-8B"],
                }
            ]
        },
    }


def wired_pod(cluster: Cluster, ns: str, cb: str) -> dict[str, Any]:
    """Create an SGLang engine pod once the webhook wires it to ``cb`` (dry runs until
    the backend's endpoint reached its view)."""

    def dry_run_wired() -> bool:
        pod = cluster.kube.request(
            "POST", k.PODS.collection(ns), query={"dryRun": "All"}, body=sglang_pod("probe")
        )
        annotations = pod["metadata"].get("annotations") or {}
        return annotations.get(c.ANNOTATION_INJECTED_BY) == f"{ns}/{cb}"

    poll(dry_run_wired, timeout=30, what=f"the webhook wiring engine pods to {ns}/{cb}")
    return cluster.kube.create(k.PODS, ns, sglang_pod("engine"))


def mp_worker(pod: dict[str, Any]) -> dict[str, Any]:
    return next(
        i for i in pod["spec"].get("initContainers") or [] if i["name"] == "lmcache-mp-worker"
    )


# ------------------------------------------------------------------ tests


def test_each_managed_tier_admits_only_its_engines_and_redis_requires_the_wired_password(
    cluster: Cluster, stack: Stack, wired: str, tmp_path: Path
) -> None:
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    other_ns = cluster.namespace()
    redis_cb = cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    lm_cb = cluster.create_cb(ns, "docs", LM_SPEC, NO_GATE)

    # ---- the NetworkPolicies, evaluated from the objects
    for cb, workload, port, engine_labels in (
        (redis_cb, "chat-redis", 6379, REDIS_ENGINES),
        (lm_cb, "docs-lmcache-server", 65432, LM_ENGINES),
    ):
        policy = wait_object(cluster, k.NETWORKPOLICIES, ns, workload)
        assert policy["metadata"]["ownerReferences"][0]["uid"] == cb["metadata"]["uid"]
        every = policies(cluster, ns)
        target = provider_pod(cluster, ns, workload)
        selecting = [p["metadata"]["name"] for p in every if applies_to_ingress(p, target)]
        assert selecting == [workload], "exactly its own policy isolates the provider pods"
        assert ingress_allowed(every, target, pod_ref(ns, {**engine_labels, "x": "y"}), port)
        assert not ingress_allowed(every, target, pod_ref(ns, {"app": "intruder"}), port)
        assert not ingress_allowed(every, target, pod_ref(other_ns, dict(engine_labels)), port)

    # ---- the Secret, and a Redis started with the rendered arguments requires it
    secret = wait_object(cluster, k.SECRETS, ns, "chat-redis-auth")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == redis_cb["metadata"]["uid"]
    password = secret_password(secret)
    assert password
    redis_dep = wait_object(cluster, k.DEPLOYMENTS, ns, "chat-redis")
    assert_no_literal(redis_dep, password)
    pod_spec = redis_dep["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    env = secret_env(container, cluster, ns)
    args = [expand(a, env) for a in container["args"]]
    assert not any(password in a for a in args), "no password on the command line"
    args = mount_secret_volumes(pod_spec, container, args, cluster, ns, tmp_path)

    # ---- the webhook wires the MP worker with a reference only
    cluster.wait_cb(ns, "chat", lambda o: bool((o.get("status") or {}).get("endpoint")), "endpoint")
    pod = wired_pod(cluster, ns, "chat")
    assert_no_literal(pod, password)
    worker = mp_worker(pod)
    (ref,) = [e for e in worker["env"] if "valueFrom" in e]
    assert ref["valueFrom"]["secretKeyRef"]["name"] == "chat-redis-auth"
    assert get(cluster, k.SECRETS, ns, "chat-redis-auth") is not None, "a Secret that exists"
    l2 = json.loads(worker["args"][worker["args"].index("--l2-adapter") + 1])
    assert "password" not in l2, "LMCache's resp adapter reads LMCACHE_RESP_PASSWORD itself"
    assert ref["name"] == "LMCACHE_RESP_PASSWORD"
    worker_env = secret_env(worker, cluster, ns)
    assert not any(password in expand(a, worker_env) for a in worker["args"])
    wired_password = worker_env["LMCACHE_RESP_PASSWORD"]

    server = RedisServer(server_args=args, password=password).start()
    try:
        unauthenticated, _ = resp(server.port, ["PING"], ["QUIT"])
        assert unauthenticated.startswith(b"-NOAUTH"), unauthenticated
        wrong, _ = resp(server.port, ["AUTH", "not-the-password"], ["QUIT"])
        assert wrong.startswith(b"-WRONGPASS") or wrong.startswith(b"-ERR"), wrong
        auth, pong = resp(server.port, ["AUTH", wired_password], ["PING"])
        assert (auth, pong) == (b"+OK", b"+PONG")
    finally:
        server.stop()


def test_drift_is_repaired_and_a_deleted_secret_comes_back_with_a_new_password(
    cluster: Cluster, stack: Stack
) -> None:
    """Also the upgrade path: a backend whose Secret and policy are missing (as one
    created before this change) gets them on its next reconcile."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    policy = wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    old = secret_password(wait_object(cluster, k.SECRETS, ns, "chat-redis-auth"))

    opened: dict[str, Any] = {"spec": {"ingress": [{}]}}  # everyone, every port
    cluster.kube.patch(k.NETWORKPOLICIES, ns, "chat-redis", opened, content_type=k.MERGE_PATCH)
    poll(
        lambda: (
            get(cluster, k.NETWORKPOLICIES, ns, "chat-redis")["spec"]["ingress"]  # type: ignore[index]
            == policy["spec"]["ingress"]
        ),
        timeout=30,
        what="the opened policy to be repaired",
    )

    cluster.kube.delete(k.SECRETS, ns, "chat-redis-auth")
    cluster.kube.delete(k.NETWORKPOLICIES, ns, "chat-redis")
    new = poll(
        lambda: secret_password(get(cluster, k.SECRETS, ns, "chat-redis-auth")),
        # Secrets are not watched (the worker may not list them): the resync at worst.
        timeout=60,
        what="the Secret to come back",
    )
    assert new != old
    wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    want = keyed_digest(cluster, ns)
    digest = poll(
        lambda: template_digest(cluster, ns) == want or None,
        timeout=30,
        what="Redis's pod template to carry the new password's digest",
    )
    dep = cluster.kube.get(k.DEPLOYMENTS, ns, "chat-redis")
    assert_no_literal(dep, new)
    assert digest


def test_keys_added_inside_the_policy_are_removed_exactly(cluster: Cluster, stack: Stack) -> None:
    """Exact drift repair (docs/decisions.md): a ``matchExpressions`` added to our
    ``podSelector`` (the policy would select no pod: the tier open to everyone), an
    extra peer, an ``endPort`` and a changed policy type, written by another field
    manager that server-side apply would leave alone, are all removed within 60 s."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    policy = wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    want = normalized_policy_spec(policy["spec"])
    drifted = copy.deepcopy(policy["spec"])
    drifted["podSelector"]["matchExpressions"] = [
        {"key": "nothing", "operator": "In", "values": ["x"]}
    ]
    drifted["ingress"][0]["from"].append({"namespaceSelector": {}})
    drifted["ingress"][0]["ports"][0]["endPort"] = 65535
    drifted["policyTypes"] = ["Ingress", "Egress"]
    cluster.kube.patch(
        k.NETWORKPOLICIES, ns, "chat-redis", {"spec": drifted}, content_type=k.MERGE_PATCH
    )
    live = get(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    assert live is not None
    assert normalized_policy_spec(live["spec"]) != want, "the drift was written"
    poll(
        lambda: (
            normalized_policy_spec(
                (get(cluster, k.NETWORKPOLICIES, ns, "chat-redis") or {}).get("spec") or {}
            )
            == want
        ),
        timeout=60,
        what="every added key to be removed",
    )


def test_a_foreign_networkpolicy_with_the_name_is_left_alone(
    cluster: Cluster, stack: Stack
) -> None:
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    theirs = cluster.kube.create(
        k.NETWORKPOLICIES,
        ns,
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "chat-redis", "labels": {"team": "theirs"}},
            "spec": {"podSelector": {"matchLabels": {"app": "theirs"}}, "policyTypes": ["Ingress"]},
        },
    )
    cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    got = cluster.wait_condition(ns, "chat", "Ready", "False", "NameConflict")
    ready = next(x for x in got["status"]["conditions"] if x["type"] == "Ready")
    assert "NetworkPolicy chat-redis" in ready["message"]
    assert cluster.kube.get(k.NETWORKPOLICIES, ns, "chat-redis") == theirs
    # Held as a unit: not even the Secret is written while the name is taken.
    assert get(cluster, k.SECRETS, ns, "chat-redis-auth") is None

    cluster.kube.delete(k.NETWORKPOLICIES, ns, "chat-redis")
    ours = wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    assert ours["metadata"]["ownerReferences"][0]["name"] == "chat"
    wait_object(cluster, k.SECRETS, ns, "chat-redis-auth")


def test_the_opt_out_drops_the_policy_keeps_the_password_and_is_validated(
    cluster: Cluster, stack: Stack, wired: str
) -> None:
    stack.start_dispatcher()
    stack.start_worker()
    ns = wired
    cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    password = secret_password(wait_object(cluster, k.SECRETS, ns, "chat-redis-auth"))

    with pytest.raises(k.ApiError) as bad:
        cluster.patch_cb(
            ns, "chat", {"metadata": {"annotations": {c.ANNOTATION_SKIP_NETWORK_POLICY: "yes"}}}
        )
    assert bad.value.status == 422
    assert f"metadata.annotations[{c.ANNOTATION_SKIP_NETWORK_POLICY}]" in bad.value.body

    cluster.patch_cb(
        ns, "chat", {"metadata": {"annotations": {c.ANNOTATION_SKIP_NETWORK_POLICY: "true"}}}
    )
    poll(
        lambda: get(cluster, k.NETWORKPOLICIES, ns, "chat-redis") is None,
        timeout=30,
        what="the policy to be shed",
    )
    assert secret_password(cluster.kube.get(k.SECRETS, ns, "chat-redis-auth")) == password
    assert condition(cluster.cb(ns, "chat"), "Ready") != ("False", "NameConflict")

    cluster.patch_cb(
        ns, "chat", {"metadata": {"annotations": {c.ANNOTATION_SKIP_NETWORK_POLICY: "false"}}}
    )
    wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")


def real_pod_ref(cluster: Cluster, ns: str, labels: dict[str, str]) -> PodRef:
    """A pod of ``ns`` with the namespace's labels as the API server stored them (its
    kubernetes.io/metadata.name included, which the API server sets)."""
    namespace = cluster.kube.request("GET", f"/api/v1/namespaces/{ns}")
    return PodRef(ns, labels, dict(namespace["metadata"].get("labels") or {}))


def consumer_spec(owner_ns: str) -> dict[str, Any]:
    return {
        **REDIS_SPEC,
        "allowCrossNamespace": True,
        "remoteStorage": {
            "provider": "Redis",
            "ownership": "External",
            "endpoint": f"chat-redis.{owner_ns}.svc:6379",
        },
    }


def test_a_tier_opens_only_to_the_namespaces_its_owner_names_and_they_authenticate(
    cluster: Cluster, stack: Stack, webhook_suffix: str, tmp_path: Path
) -> None:
    """Decision "Cross-namespace consumers need the owner's consent", on the real API
    server with the real dispatcher, worker and webhook: owner (team A, naming team B),
    consumer (team B), non-consenting consumer (team C) and a stranger namespace,
    evaluated against every NetworkPolicy of the tier; team B's engines authenticate to a
    real Redis-compatible server started as the tier's Deployment says, with the copy
    the worker made; team C's backend is not Ready, says why, and gets a Warning Event;
    withdrawing consent closes B again within 60 s."""
    stack.start_dispatcher()
    stack.start_worker()
    team_a = cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})
    team_b = cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})
    team_c = cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})
    stranger = cluster.namespace()
    consent = {**NO_GATE, c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: team_b}
    # allowCrossNamespace on the owner opens nothing by itself.
    cluster.create_cb(team_a, "chat", {**REDIS_SPEC, "allowCrossNamespace": True}, consent)
    cluster.create_cb(team_b, "shared", consumer_spec(team_a), NO_GATE)
    cluster.create_cb(team_c, "shared", consumer_spec(team_a), NO_GATE)

    target = provider_pod(cluster, team_a, "chat-redis")

    def admits(ns: str, labels: dict[str, str]) -> bool:
        every = policies(cluster, team_a)
        return ingress_allowed(every, target, real_pod_ref(cluster, ns, labels), 6379)

    poll(lambda: admits(team_b, dict(REDIS_ENGINES)), timeout=60, what="team B admitted")
    assert admits(team_a, dict(REDIS_ENGINES))
    assert not admits(team_b, {"app": "intruder"})
    assert not admits(team_c, dict(REDIS_ENGINES)), "no consent for team C"
    assert not admits(stranger, dict(REDIS_ENGINES)), "engine labels elsewhere get nothing"
    assert '"namespaceSelector": {}' not in json.dumps(policies(cluster, team_a))

    # ---- team B authenticates with its own copy of the password
    copy_ = poll(
        lambda: get(cluster, k.SECRETS, team_b, "shared-redis-auth-copy"),
        timeout=60,
        what="team B's credentials copy",
    )
    owner_secret = cluster.kube.get(k.SECRETS, team_a, "chat-redis-auth")
    assert secret_password(copy_) == secret_password(owner_secret)
    assert (
        copy_["metadata"]["ownerReferences"][0]["uid"]
        == cluster.cb(team_b, "shared")["metadata"]["uid"]
    )
    assert copy_["metadata"]["annotations"][ANNOTATION_COPY_OF] == f"{team_a}/chat-redis-auth"
    pod = wired_pod(cluster, team_b, "shared")
    worker = mp_worker(pod)
    (ref,) = [e for e in worker["env"] if "valueFrom" in e]
    assert ref["valueFrom"]["secretKeyRef"] == {
        "name": "shared-redis-auth-copy",
        "key": "password",
        "optional": True,
    }
    password = str(secret_password(owner_secret))
    worker_env = secret_env(worker, cluster, team_b)
    assert not any(password in expand(a, worker_env) for a in worker["args"])
    redis_dep = cluster.kube.get(k.DEPLOYMENTS, team_a, "chat-redis")
    pod_spec = redis_dep["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    args = mount_secret_volumes(
        pod_spec, container, list(container["args"]), cluster, team_a, tmp_path
    )
    server = RedisServer(server_args=args, password=password).start()
    try:
        refused, _ = resp(server.port, ["PING"], ["QUIT"])
        assert refused.startswith(b"-NOAUTH"), refused
        auth, pong = resp(server.port, ["AUTH", worker_env["LMCACHE_RESP_PASSWORD"]], ["PING"])
        assert (auth, pong) == (b"+OK", b"+PONG")
    finally:
        server.stop()
    cluster.wait_condition(team_b, "shared", "Ready", "True", "ExternalEndpointAccepted", 60)

    # ---- team C says it is refused, once
    got = cluster.wait_condition(
        team_c, "shared", "Ready", "False", c.REASON_CROSS_NAMESPACE_CONSENT_MISSING, 60
    )
    ready = next(x for x in got["status"]["conditions"] if x["type"] == "Ready")
    assert team_c in ready["message"]
    assert get(cluster, k.SECRETS, team_c, "shared-redis-auth-copy") is None
    refusals = poll(
        lambda: (
            [
                e
                for e in cluster.events(team_c, "shared")
                if e.get("reason") == c.EVENT_CROSS_NAMESPACE_REFUSED
            ]
            or None
        ),
        timeout=30,
        what="the Warning Event",
    )
    assert [e["type"] for e in refusals] == ["Warning"]

    # ---- consent withdrawn: B is closed and told, its copy goes
    cluster.patch_cb(
        team_a,
        "chat",
        {"metadata": {"annotations": {c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: stranger}}},
    )
    poll(lambda: not admits(team_b, dict(REDIS_ENGINES)), timeout=60, what="team B closed")
    cluster.wait_condition(
        team_b, "shared", "Ready", "False", c.REASON_CROSS_NAMESPACE_CONSENT_MISSING, 60
    )
    poll(
        lambda: get(cluster, k.SECRETS, team_b, "shared-redis-auth-copy") is None,
        timeout=60,
        what="team B's copy to go",
    )


def test_a_two_label_service_endpoint_is_a_consumer_judged_by_consent(
    cluster: Cluster, stack: Stack, webhook_suffix: str
) -> None:
    """Rule "Any Service form counts", on the real API server with the real webhook,
    dispatcher and worker: ``chat-redis.<owner ns>:6379`` (resolved through the pod's
    ``svc.<domain>`` search domain) names the tier's Service. Without
    allowCrossNamespace the real webhook refuses it as a crossing; with it, the
    consenting namespace's consumer is admitted and wired to its credentials copy, and
    a namespace without consent is refused and says so, never
    Ready/ExternalEndpointAccepted."""
    stack.start_dispatcher()
    stack.start_worker()
    team_a = cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})
    team_b = cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})
    team_c = cluster.namespace(labels={TEST_NAMESPACE_LABEL: webhook_suffix})
    consent = {**NO_GATE, c.ANNOTATION_ALLOWED_CONSUMER_NAMESPACES: team_b}
    cluster.create_cb(team_a, "chat", REDIS_SPEC, consent)
    spec = consumer_spec(team_a)
    spec["remoteStorage"]["endpoint"] = f"chat-redis.{team_a}:6379"
    unacknowledged = {key: v for key, v in spec.items() if key != "allowCrossNamespace"}
    with pytest.raises(k.ApiError) as refused:
        cluster.create_cb(team_c, "blind", unacknowledged, NO_GATE)
    assert refused.value.status == 422
    assert "spec.allowCrossNamespace" in str(refused.value)
    cluster.create_cb(team_b, "shared", spec, NO_GATE)
    cluster.create_cb(team_c, "shared", spec, NO_GATE)

    target = provider_pod(cluster, team_a, "chat-redis")
    poll(
        lambda: ingress_allowed(
            policies(cluster, team_a),
            target,
            real_pod_ref(cluster, team_b, dict(REDIS_ENGINES)),
            6379,
        ),
        timeout=60,
        what="team B admitted",
    )
    assert not ingress_allowed(
        policies(cluster, team_a), target, real_pod_ref(cluster, team_c, dict(REDIS_ENGINES)), 6379
    )
    cluster.wait_condition(team_b, "shared", "Ready", "True", "ExternalEndpointAccepted", 60)
    worker = mp_worker(wired_pod(cluster, team_b, "shared"))
    (ref,) = [e for e in worker["env"] if "valueFrom" in e]
    copy_name = ref["valueFrom"]["secretKeyRef"]["name"]
    copied = poll(
        lambda: get(cluster, k.SECRETS, team_b, copy_name), timeout=60, what="team B's copy"
    )
    owner_secret = cluster.kube.get(k.SECRETS, team_a, "chat-redis-auth")
    assert secret_password(copied) == secret_password(owner_secret)
    cluster.wait_condition(
        team_c, "shared", "Ready", "False", c.REASON_CROSS_NAMESPACE_CONSENT_MISSING, 60
    )


def old_style_objects(cb: dict[str, Any]) -> list[dict[str, Any]]:
    """What the worker rendered for a managed Redis before this change: the Deployment
    and Service alone, Redis without a password and with protected mode off."""
    objs = [
        o
        for o in render_managed_objects(CacheBackend.model_validate(cb))
        if o["kind"] in ("Deployment", "Service")
    ]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    template = dep["spec"]["template"]
    template["metadata"].pop("annotations")
    template["spec"].pop("volumes")
    container = template["spec"]["containers"][0]
    container.pop("volumeMounts")
    args = container["args"]
    at = args.index(AUTH_CONFIG_PATH)
    args[at : at + 1] = ["--protected-mode", "no"]
    return objs


def test_a_backend_from_before_this_change_gets_its_secret_policy_and_password(
    cluster: Cluster, stack: Stack
) -> None:
    ns = cluster.namespace()
    cb = cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    for obj in old_style_objects(cb):
        cluster.kube.apply(k.BY_KIND[obj["kind"]], ns, obj)
    assert get(cluster, k.SECRETS, ns, "chat-redis-auth") is None

    stack.start_dispatcher()
    stack.start_worker()
    password = poll(
        lambda: secret_password(get(cluster, k.SECRETS, ns, "chat-redis-auth")),
        timeout=30,
        what="the password Secret",
    )
    wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")

    def upgraded() -> dict[str, Any] | None:
        dep = get(cluster, k.DEPLOYMENTS, ns, "chat-redis") or {}
        containers = dep["spec"]["template"]["spec"]["containers"]
        return dep if AUTH_CONFIG_PATH in containers[0]["args"] else None

    dep = poll(upgraded, timeout=30, what="Redis to require the password")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--protected-mode" not in container["args"]
    (volume,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "chat-redis-auth"
    assert template_digest(cluster, ns) == keyed_digest(cluster, ns)
    assert_no_literal(dep, password)


@pytest.mark.real_controllers
def test_on_real_rollouts_the_policy_selects_the_redis_pods_a_new_password_rolls_them_and_gc(
    cluster: Cluster, stack: Stack
) -> None:
    """With kube-controller-manager, the scheduler and kwok: the policy selects the pods
    the Redis Deployment really runs; a re-created Secret (rotation) rolls them onto
    pods started with the new password's digest; deleting the backend lets the garbage
    collector remove the Secret and the policy (owner references)."""
    stack.start_dispatcher()
    stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(ns, "chat", REDIS_SPEC, NO_GATE)
    policy = wait_object(cluster, k.NETWORKPOLICIES, ns, "chat-redis")
    dep = wait_rolled_out(cluster, ns, "Deployment", "chat-redis")
    first = pods_of(cluster, ns, dep)
    assert first
    for pod in first:
        target = pod_ref(ns, pod["metadata"]["labels"])
        assert applies_to_ingress(policy, target)
        assert ingress_allowed([policy], target, pod_ref(ns, dict(REDIS_ENGINES)), 6379)
        assert not ingress_allowed([policy], target, pod_ref(ns, {"app": "intruder"}), 6379)

    old = secret_password(cluster.kube.get(k.SECRETS, ns, "chat-redis-auth"))
    cluster.kube.delete(k.SECRETS, ns, "chat-redis-auth")
    new = poll(
        lambda: secret_password(get(cluster, k.SECRETS, ns, "chat-redis-auth")),
        timeout=30,
        what="a new password Secret",
    )
    assert new != old
    want = keyed_digest(cluster, ns)

    def rolled() -> list[dict[str, Any]] | None:
        live = cluster.kube.get(k.DEPLOYMENTS, ns, "chat-redis")
        pods = pods_of(cluster, ns, live)
        if not rolled_out(live, sum(1 for p in pods if pod_ready(p))):
            return None
        digests = {
            (p["metadata"].get("annotations") or {}).get(c.ANNOTATION_AUTH_DIGEST) for p in pods
        }
        return pods if pods and digests == {want} else None

    second = poll(rolled, timeout=90, what="Redis rolled onto the new password")
    assert not {p["metadata"]["uid"] for p in second} & {p["metadata"]["uid"] for p in first}

    cluster.kube.delete(k.CACHEBACKENDS, ns, "chat")

    def collected() -> bool:
        return all(
            get(cluster, res, ns, name) is None
            for res, name in ((k.SECRETS, "chat-redis-auth"), (k.NETWORKPOLICIES, "chat-redis"))
        )

    poll(collected, timeout=60, what="the Secret and the policy to be garbage-collected")
