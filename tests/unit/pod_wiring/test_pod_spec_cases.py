"""The Pod webhook, sentence by sentence from the spec, over HTTP through the real app.

Every case writes CacheBackend YAML files to a directory, serves them through
``create_app(FileBackendSource(dir, load_backends), InjectContext(IMG))`` — what
``icache webhook --insecure --backends-from DIR --kvevent-subscriber-image IMG`` runs —
posts an AdmissionReview to ``/mutate--v1-pod``, applies the returned JSON patch to the
request object with ``jsonpatch`` and asserts the resulting pod exactly. For every case:
the response is ``allowed: true``; the patch is minimal (no op on an unchanged part,
never a whole-object/spec/metadata replace); re-admitting the result yields NO patch.

Sources, cited in each case's id or comment:
  [PW]  docs/api.md "The Pod webhook (engine wiring)" (table rows)
  [SGL] "SGLang LMCache MP mode"       [HC]  "SGLang native HiCache"
  [EO]  "Events-only mode"             [MC]  "Mooncake provider configuration"
  [KC]  "LMCache client kernels"       [OV]  "Engine-injection overrides"
  [RS]  "Reserved declarations"        [EXT] "Externally owned remote storage"
  [IP]  "Index Participation"          [SC]  docs/server-contract.md (subscriber, engine flags)
  [AR]  docs/architecture.md (embedded mode: other kinds ignored, status honoured)
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from fastapi.testclient import TestClient

from shared import constants as c
from shared.runtime_adapters.base import InjectContext
from tests import builders
from tests.builders import (
    MODEL,
    SGLANG_IMAGE,
    UID,
    VLLM_IMAGE,
    backend,
    env_of,
    external,
    managed,
)
from tests.builders import replicaset_pod as pod
from tests.builders import vllm_container as vllm
from webhook_svc.app import PATH_MUTATE_POD, create_app
from webhook_svc.backend_files import load_backends
from webhook_svc.backend_source import FileBackendSource

IMG = "ghcr.io/example/kvevent-subscriber:v1"
SERVER = InjectContext().server_address
NS = "team-a"
INJECTED_BY = c.ANNOTATION_INJECTED_BY
INJECTED_BY_UID = c.ANNOTATION_INJECTED_BY_UID
UID_LABEL = c.LABEL_INJECTED_BY_UID
INJECT_SKIPPED = c.ANNOTATION_INJECT_SKIPPED
SKIP_INJECT = c.ANNOTATION_SKIP_INJECT
KERNEL_CHECK = c.ANNOTATION_LMCACHE_KERNEL_CHECK
KERNEL_CHECK_MODE = c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE
CONNECTOR = '{{"kv_connector":"LMCacheConnectorV1","kv_role":"{}"}}'

# ------------------------------------------------------------------------ harness


class Webhook:
    """One webhook app over one backend directory."""

    def __init__(self, directory: Path, image: str | None = IMG) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        app = create_app(
            FileBackendSource(directory, load_backends),
            InjectContext(kvevent_subscriber_image=image),
        )
        self.client = TestClient(app)
        self._files = 0

    def write(self, *docs: dict[str, Any], name: str | None = None) -> Path:
        self._files += 1
        path = self.directory / (name or f"{self._files:02d}-backends.yaml")
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path

    def write_text(self, name: str, text: str) -> None:
        (self.directory / name).write_text(text)

    def post(
        self,
        obj: Any,
        *,
        namespace: str | None = NS,
        operation: str = "CREATE",
        uid: str = "req-1",
    ) -> dict[str, Any]:
        body = builders.admission_review(
            obj, operation=operation, namespace=namespace, uid=uid, resource="pods"
        )
        http = self.client.post(PATH_MUTATE_POD, json=body)
        assert http.status_code == 200, http.text
        review: dict[str, Any] = http.json()
        assert review["apiVersion"] == "admission.k8s.io/v1"
        assert review["kind"] == "AdmissionReview"
        assert review["response"]["uid"] == uid
        assert review["response"]["allowed"] is True  # [PW] Fail-open: always allowed
        return review

    def admit(
        self, pod: dict[str, Any], *, namespace: str | None = NS, readmit: bool = True
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(resulting pod, patch ops); asserts minimality and an empty re-admission."""
        review = self.post(copy.deepcopy(pod), namespace=namespace)
        ops = ops_of(review)
        result = jsonpatch.apply_patch(copy.deepcopy(pod), ops) if ops else copy.deepcopy(pod)
        assert_minimal(pod, ops, result)
        if readmit:
            # [PW] Idempotency: "Re-admission of a fully-injected pod therefore produces
            # an empty JSON-patch set" (and every other outcome is stable too).
            again = self.post(copy.deepcopy(result), namespace=namespace, uid="req-2")
            assert ops_of(again) == [], ops_of(again)
        return result, ops


def ops_of(review: dict[str, Any]) -> list[dict[str, Any]]:
    response = review["response"]
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    assert ops, "an empty patch must be omitted"
    return ops


_COARSE = {"", "/spec", "/metadata", "/apiVersion", "/kind", "/status"}
# The injected-by-uid label and the engine-metrics label the PodMonitor selects by,
# and nothing else of the labels.
_LABEL_PATHS = {
    "/metadata/labels/inferencecache.io~1injected-by-uid",
    "/metadata/labels/inferencecache.io~1metrics",
}
_TOUCHABLE = (
    "/metadata/annotations",
    "/spec/containers",
    "/spec/initContainers",
    "/spec/volumes",
    "/spec/hostNetwork",
    "/spec/dnsPolicy",
)


def _resolve(doc: Any, pointer: str) -> tuple[bool, Any]:
    try:
        return True, jsonpatch.JsonPointer(pointer).resolve(doc)
    except (jsonpatch.JsonPointerException, KeyError, IndexError, TypeError):
        return False, None


def assert_minimal(
    before: dict[str, Any], ops: list[dict[str, Any]], after: dict[str, Any]
) -> None:
    """No whole-object replace, nothing outside the wiring surface, no no-op ops."""
    for op in ops:
        path = op["path"]
        assert path not in _COARSE, op
        assert path.startswith(_TOUCHABLE) or path in _LABEL_PATHS, op
        if op["op"] in ("replace", "remove"):
            existed, _ = _resolve(before, path)
            assert existed, op
        if op["op"] == "replace":
            _, old = _resolve(before, path)
            assert old != op["value"], f"no-op replace: {op}"
    if not ops:
        assert before == after


def review_ok_without_patch(hook: Webhook, obj: Any, *, reason: str, **kw: Any) -> None:
    """Admitted unchanged, and for ``reason``: the response's auditAnnotations carry
    the decision, so a fail-open for one reason cannot pass as another ("no patch" alone
    would let any fail-open pass as no_match)."""
    review = hook.post(obj, **kw)
    assert "patch" not in review["response"], ops_of(review)
    decision = review["response"]["auditAnnotations"]
    assert decision["reason"] == reason, decision


# ---------------------------------------------------------------------- builders


def sglang(name: str = "sglang", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": SGLANG_IMAGE,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", MODEL, "--port", "30000"],
        **extra,
    }


GPU = {"limits": {"nvidia.com/gpu": "1"}}


def vllm_env(
    *,
    remote: str | None = None,
    chunk: str = "256",
    cpu_size: str = "4.0",
    fail_open: str = "true",
    serde: str | None = None,
) -> list[dict[str, Any]]:
    """[PW]/[RS]/[MC]/[SC]: the vLLM+LMCache env, in render order. A remote binding
    always names the serializer (``naive`` unless spec.lmCache.remoteSerde)."""
    if remote and serde is None:
        serde = "naive"
    env: list[dict[str, Any]] = [
        {"name": "VLLM_USE_V1", "value": "1"},
        {"name": "PYTHONHASHSEED", "value": "0"},
    ]
    if remote:
        env.append({"name": "LMCACHE_REMOTE_URL", "value": remote})
    env += [
        {"name": "LMCACHE_CHUNK_SIZE", "value": chunk},
        {"name": "LMCACHE_LOCAL_CPU", "value": "True"},
        {"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": cpu_size},
        {"name": "INFERENCECACHE_FAIL_OPEN", "value": fail_open},
    ]
    if serde:
        env.append({"name": "LMCACHE_REMOTE_SERDE", "value": serde})
    if remote and remote.startswith("mooncakestore://"):
        # LMCache's Mooncake connector reads the master from extra_config, not the URL;
        # local_hostname expands the downward-API pod IP defined just before it.
        master = remote.removeprefix("mooncakestore://")
        env += [
            {
                "name": "INFERENCECACHE_POD_IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
            {
                "name": "LMCACHE_EXTRA_CONFIG",
                "value": '{"local_hostname":"$(INFERENCECACHE_POD_IP)",'
                f'"master_server_address":"{master}",'
                '"metadata_server":"P2PHANDSHAKE","protocol":"tcp"}',
            },
        ]
    return env


def subscriber(
    *, hash_scheme: str = "vllm", offload: bool = True, port: int = 5557, model: str = MODEL
) -> dict[str, Any]:
    """[SC] "The kvevent-subscriber sidecar": the args, exactly."""
    args = [
        f"--engine-endpoint=tcp://127.0.0.1:{port}",
        f"--server={SERVER}",
        "--replica-id=$(POD_NAME)",
        "--tenant-id=$(POD_NAMESPACE)",
        f"--model-id={model}",
        f"--hash-scheme={hash_scheme}",
    ]
    if offload:
        args.append("--ignore-block-removed=true")
    return {
        "name": "kvevent-subscriber",
        "image": IMG,
        "args": args,
        "env": [
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
        ],
        # Small documented requests/limits, restricted Pod Security.
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": RESTRICTED_NON_ROOT,
    }


# The Pod Security "restricted" controls every added container carries.
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_NON_ROOT = {**RESTRICTED, "runAsNonRoot": True}


def stamped(
    p: dict[str, Any], key: str = f"{NS}/cache", uid: str = UID, **extra: str
) -> dict[str, str]:
    """[PW] Annotations: the pod's own plus injected-by and injected-by-uid."""
    out = {
        k: v
        for k, v in (p["metadata"].get("annotations") or {}).items()
        if k not in (INJECTED_BY, INJECTED_BY_UID, INJECT_SKIPPED)
    }
    return {**out, INJECTED_BY: key, INJECTED_BY_UID: uid, **extra}


def with_uid_label(out: dict[str, Any], uid: str = UID) -> None:
    """The injected-by-uid label the webhook stamps beside the annotations."""
    out["metadata"]["labels"] = {**(out["metadata"].get("labels") or {}), UID_LABEL: uid}


def flag_value(args: list[str], flag: str, default: str) -> str:
    """The last ``flag value`` / ``flag=value`` of ``args``, else ``default``."""
    found = default
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def with_metrics_scrape(out: dict[str, Any], ports: dict[str, str]) -> None:
    """The engine-metrics label and port annotations the PodMonitor scrapes by: the
    engine's /metrics port and, beside SGLang, the LMCache MP worker's."""
    out["metadata"]["annotations"] = {**out["metadata"]["annotations"], **ports}
    out["metadata"]["labels"] = {**out["metadata"]["labels"], c.LABEL_METRICS: "engine"}


# So vLLM's /metrics collects LMCache's series from its other processes (vLLM + LMCache).
MULTIPROC_DIR = {"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/tmp/lmcache_prometheus"}


def expect_vllm(
    p: dict[str, Any],
    *,
    role: str = "kv_both",
    env: list[dict[str, Any]] | None = None,
    sub: dict[str, Any] | None = None,
    key: str = f"{NS}/cache",
) -> dict[str, Any]:
    """The expected wired pod for a one-container vLLM pod (no kernel check)."""
    out = copy.deepcopy(p)
    engine = out["spec"]["containers"][0]
    engine["args"] = [*engine.get("args", []), "--kv-transfer-config", CONNECTOR.format(role)]
    engine["env"] = [*engine.get("env", []), *(env if env is not None else vllm_env())]
    if not any(var["name"] == MULTIPROC_DIR["name"] for var in engine["env"]):
        engine["env"].append(MULTIPROC_DIR)
    out["spec"]["containers"].append(sub or subscriber())
    out["metadata"]["annotations"] = stamped(p, key)
    with_uid_label(out)
    port = flag_value(engine["args"], "--port", "8000")
    with_metrics_scrape(out, {c.ANNOTATION_METRICS_PORT: port})
    return out


@pytest.fixture
def hook(tmp_path: Path) -> Webhook:
    return Webhook(tmp_path / "backends")


# =========================================================================== [PW]
# Selection


def test_pw_selection_first_matching_backend_by_name_wins(hook: Webhook) -> None:
    # [PW] "The first matching CacheBackend wins" — [IP] "sorted by metadata.name".
    hook.write(backend("zeta", uid="uid-z"))
    hook.write(backend("alpha", uid="uid-a"), backend("mid", uid="uid-m"))
    result, _ = hook.admit(pod())
    assert result["metadata"]["annotations"][INJECTED_BY] == f"{NS}/alpha"
    assert result["metadata"]["annotations"][INJECTED_BY_UID] == "uid-a"


def test_pw_selection_nil_and_empty_selectors_are_skipped(hook: Webhook) -> None:
    # [PW] "one with a nil or empty EngineSelector is skipped".
    nil = backend("a-nil", no_selector=True)
    empty = backend("b-empty")
    empty["spec"]["engineSelector"] = {"matchLabels": {}}
    hook.write(nil, empty)
    review_ok_without_patch(hook, pod(), reason="no_match")
    hook.write(backend("c-real", uid="uid-c"))
    result, _ = hook.admit(pod())
    assert result["metadata"]["annotations"][INJECTED_BY] == f"{NS}/c-real"


def test_pw_selection_every_match_label_must_be_on_the_pod(hook: Webhook) -> None:
    # [PW] "matches pod.Labels against each Spec.EngineSelector.MatchLabels" (subset).
    hook.write(backend(selector={"app": "engine", "tier": "gpu"}))
    review_ok_without_patch(hook, pod(), reason="no_match")
    result, _ = hook.admit(pod(labels={"app": "engine", "tier": "gpu", "extra": "x"}))
    assert result["metadata"]["annotations"][INJECTED_BY] == f"{NS}/cache"


def test_pw_selection_other_namespace_never_matches(hook: Webhook) -> None:
    # [PW] "Lists CacheBackends in the pod's namespace".
    hook.write(backend(namespace="team-b"))
    review_ok_without_patch(hook, pod(), reason="no_match")


def test_pw_selection_request_namespace_when_the_pod_names_none(hook: Webhook) -> None:
    # The API server sends request.namespace; the object may not carry one.
    hook.write(backend())
    result, _ = hook.admit(pod(namespace=None), namespace=NS)
    assert result["metadata"]["annotations"][INJECTED_BY] == f"{NS}/cache"


def test_pw_selection_pod_namespace_when_the_request_names_none(hook: Webhook) -> None:
    hook.write(backend())
    result, _ = hook.admit(pod(), namespace=None)
    assert result["metadata"]["annotations"][INJECTED_BY] == f"{NS}/cache"


def test_pw_selection_backend_without_namespace_is_in_default(hook: Webhook) -> None:
    # [AR] embedded mode; a namespace-less object is in "default" (kubectl apply).
    hook.write(backend(namespace=None))
    review_ok_without_patch(hook, pod(), reason="no_match")  # team-a: not there
    result, _ = hook.admit(pod(namespace="default"), namespace="default")
    assert result["metadata"]["annotations"][INJECTED_BY] == "default/cache"
    # Neither the request nor the pod names a namespace: "default" as well.
    result, _ = hook.admit(pod(namespace=None), namespace=None)
    assert result["metadata"]["annotations"][INJECTED_BY] == "default/cache"


def test_ar_other_kinds_ignored_lists_unpacked_status_honoured(hook: Webhook) -> None:
    # [AR] "documents of other kinds ignored, status honoured": a published status lets
    # the managed backend wire, to the Service it owns (rule "Managed endpoints come
    # from what we own"), whatever address the status holds.
    hook.write(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cache", "namespace": NS}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "aaa", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "engine"}}},
        },
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [backend("listed", remote=managed("LMCacheServer"), status_endpoint="s:1")],
        },
    )
    result, _ = hook.admit(pod())
    want = vllm_env(remote=f"lm://listed-lmcache-server.{NS}.svc:65432")
    assert result == expect_vllm(pod(), env=want, key=f"{NS}/listed")


def test_ar_hand_written_yaml_keeps_unquoted_off_a_string(hook: Webhook) -> None:
    # [KC] "off: Never inject" — an unquoted `off` in a hand-written file is that value.
    hook.write_text(
        "hand.yaml",
        f"""\
apiVersion: inferencecache.io/v1alpha1
kind: CacheBackend
metadata:
  name: cache
  namespace: {NS}
  uid: {UID}
  annotations:
    inferencecache.io/lmcache-kernel-check: off
spec:
  runtime: VLLM
  engineSelector:
    matchLabels:
      app: engine
  observation:
    modelID: {MODEL}
""",
    )
    p = pod(vllm(resources=GPU))
    result, _ = hook.admit(p)
    assert result == expect_vllm(p)  # no lmcache-kernel-check init container


# =========================================================================== [PW]
# Injection: vLLM + LMCache, every binding


def test_pw_vllm_host_only_exact_pod(hook: Webhook) -> None:
    # [PW] "omitted remoteStorage produces a nil host-only binding"; [SC] engine flags;
    # [SC] subscriber args with --ignore-block-removed=true (Offload).
    hook.write(backend())
    p = pod()
    result, _ops = hook.admit(p)
    assert result == expect_vllm(p)
    engine = result["spec"]["containers"][0]
    assert engine["args"] == [
        "--model",
        MODEL,
        "--port",
        "8000",
        "--kv-transfer-config",
        '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}',
    ]
    assert "LMCACHE_REMOTE_URL" not in {e["name"] for e in engine["env"]}
    assert "initContainers" not in result["spec"]  # CPU engine: auto injects no check


def test_pw_vllm_managed_lmcacheserver_uses_status_endpoint(hook: Webhook) -> None:
    # [PW] "Managed ownership uses status.endpoint from the live Service".
    hook.write(
        backend(
            remote=managed("LMCacheServer"),
            status_endpoint="cache-lmcache-server.team-a.svc:65432",
        )
    )
    result, _ = hook.admit(pod())
    assert result == expect_vllm(
        pod(), env=vllm_env(remote="lm://cache-lmcache-server.team-a.svc:65432")
    )


@pytest.mark.parametrize("status", [None, "", "   "], ids=["no-status", "empty", "blank"])
def test_pw_managed_without_status_endpoint_fails_open(hook: Webhook, status: str | None) -> None:
    # [PW] "A non-nil binding with a missing endpoint fails open."
    hook.write(backend(remote=managed("LMCacheServer"), status_endpoint=status))
    review_ok_without_patch(hook, pod(), reason="missing_endpoint")


def test_pw_managed_without_status_endpoint_strips_stale_annotations(hook: Webhook) -> None:
    # [PW] "the webhook strips stale injected-by/injected-by-uid and inject-skipped".
    hook.write(backend(remote=managed("Mooncake"), integration={"engineHostNetwork": True}))
    own = {"team/keep": "me"}
    p = pod(
        annotations={
            **own,
            INJECTED_BY: f"{NS}/cache",
            INJECTED_BY_UID: UID,
            INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
        }
    )
    result, ops = hook.admit(p)
    assert result["metadata"]["annotations"] == own
    assert result["spec"] == p["spec"]  # [MC] no connector and no hostNetwork
    assert all(op["path"].startswith("/metadata/annotations") for op in ops)


def test_pw_managed_uses_status_endpoint_never_a_spec_endpoint(hook: Webhook) -> None:
    # [PW] "Managed ownership uses status.endpoint from the live Service". A stored
    # Managed backend that still carries a spec.remoteStorage.endpoint (admission rejects
    # one today; a file or an older object may have it) is wired to status.endpoint only.
    remote = {**managed("LMCacheServer"), "endpoint": "user.example.com:1234"}
    hook.write(backend(remote=remote, status_endpoint="cache-lmcache-server.team-a.svc:65432"))
    result, _ = hook.admit(pod())
    assert result == expect_vllm(
        pod(), env=vllm_env(remote="lm://cache-lmcache-server.team-a.svc:65432")
    )


def test_pw_managed_spec_endpoint_does_not_stand_in_for_status(hook: Webhook) -> None:
    # [PW] Managed: status.endpoint or nothing; "A non-nil binding with a missing endpoint
    # fails open" even when spec.remoteStorage.endpoint is set.
    remote = {**managed("LMCacheServer"), "endpoint": "user.example.com:1234"}
    hook.write(backend(remote=remote))
    review_ok_without_patch(hook, pod(), reason="missing_endpoint")


@pytest.mark.parametrize("endpoint", [None, "", "   "], ids=["unset", "empty", "blank"])
def test_ext_external_without_endpoint_never_falls_back_to_status(
    hook: Webhook, endpoint: str | None
) -> None:
    # [PW] "External ownership uses the trimmed, provider-validated
    # spec.remoteStorage.endpoint with no fallback to stale status"; "A non-nil binding
    # with a missing endpoint fails open".
    remote: dict[str, Any] = {"provider": "LMCacheServer", "ownership": "External"}
    if endpoint is not None:
        remote["endpoint"] = endpoint
    hook.write(backend(remote=remote, status_endpoint="stale.example.com:9"))
    review_ok_without_patch(hook, pod(), reason="missing_endpoint")
    stale = pod(annotations={INJECTED_BY: f"{NS}/cache", INJECTED_BY_UID: UID})
    result, _ = hook.admit(stale)
    assert result["metadata"].get("annotations", {}) == {}
    assert result["spec"] == stale["spec"]


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("lm://x:1", "lm://x:1"),  # [PW] scheme never doubled
        ("  lmcache.example.com:8100 \t", "lm://lmcache.example.com:8100"),  # trimmed
        ("10.0.0.7:65432", "lm://10.0.0.7:65432"),
        ("[fd00::7]:65432", "lm://[fd00::7]:65432"),
        ("LM://x:2", "lm://x:2"),
    ],
)
def test_ext_vllm_external_lmcacheserver_trimmed_validated_endpoint(
    hook: Webhook, endpoint: str, url: str
) -> None:
    # [PW] "External ownership uses the trimmed, provider-validated
    # spec.remoteStorage.endpoint with no fallback to stale status".
    hook.write(
        backend(remote=external("LMCacheServer", endpoint), status_endpoint="stale.example:9")
    )
    result, _ = hook.admit(pod())
    assert result == expect_vllm(pod(), env=vllm_env(remote=url))


@pytest.mark.parametrize(
    ("provider", "endpoint"),
    [
        ("LMCacheServer", "lmcache.example.com"),  # no port
        ("LMCacheServer", "x:0"),
        ("LMCacheServer", "x:70000"),
        ("LMCacheServer", "mooncakestore://x:1"),  # another provider's scheme
        ("LMCacheServer", "lm://x:1/path"),
        ("LMCacheServer", "x :1"),
        ("LMCacheServer", "fd00::7:1"),  # IPv6 must be bracketed
        ("Mooncake", "lm://m:50051"),
        ("Redis", "redis://r:6379"),
        ("LMCacheServer", ""),
        ("LMCacheServer", "   "),
    ],
)
def test_ext_invalid_external_endpoint_admits_unwired(
    hook: Webhook, provider: str, endpoint: str
) -> None:
    # [EXT] "The pod webhook applies the same validation and admits the engine pod
    # unwired on failure."
    runtime = "SGLang" if provider == "Redis" else "VLLM"
    hook.write(backend(runtime=runtime, remote=external(provider, endpoint)))
    p = pod(sglang()) if runtime == "SGLang" else pod()
    # An empty or whitespace endpoint is missing (ExternalEndpointMissing), not invalid.
    reason = "invalid_endpoint" if endpoint.strip() else "missing_endpoint"
    review_ok_without_patch(hook, p, reason=reason)
    stale = pod(annotations={INJECTED_BY: f"{NS}/cache", INJECTED_BY_UID: UID})
    if runtime == "SGLang":
        stale["spec"]["containers"] = [sglang()]
    result, _ = hook.admit(stale)
    assert result["metadata"].get("annotations", {}) == {}
    assert result["spec"] == stale["spec"]


def test_mc_vllm_managed_mooncake_without_host_network_flag(hook: Webhook) -> None:
    # [MC] "LMCACHE_REMOTE_URL=mooncakestore://<status.endpoint>"; hostNetwork is opt-in.
    hook.write(
        backend(remote=managed("Mooncake"), status_endpoint="cache-mooncake.team-a.svc:50051")
    )
    result, _ = hook.admit(pod())
    assert result == expect_vllm(
        pod(), env=vllm_env(remote="mooncakestore://cache-mooncake.team-a.svc:50051")
    )
    assert "hostNetwork" not in result["spec"]


def test_mc_engine_host_network_moves_the_pod_with_the_connector(hook: Webhook) -> None:
    # [MC] "the Pod webhook moves matched engine pods onto the host network (hostNetwork
    # + dnsPolicy: ClusterFirstWithHostNet) alongside the usual LMCACHE_* wiring".
    hook.write(
        backend(
            remote=managed("Mooncake"),
            status_endpoint="cache-mooncake.team-a.svc:50051",
            integration={"engineHostNetwork": True},
        )
    )
    p = pod()
    result, _ = hook.admit(p)
    want = expect_vllm(p, env=vllm_env(remote="mooncakestore://cache-mooncake.team-a.svc:50051"))
    want["spec"]["hostNetwork"] = True
    want["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    assert result == want


def test_mc_external_mooncake_scheme_not_doubled_with_host_network(hook: Webhook) -> None:
    hook.write(
        backend(
            remote=external("Mooncake", "mooncakestore://m.example:50051"),
            integration={"engineHostNetwork": True},
        )
    )
    result, _ = hook.admit(pod(dnsPolicy="ClusterFirst"))
    engine_env = {e["name"]: e.get("value") for e in result["spec"]["containers"][0]["env"]}
    assert engine_env["LMCACHE_REMOTE_URL"] == "mooncakestore://m.example:50051"
    assert '"master_server_address":"m.example:50051"' in str(engine_env["LMCACHE_EXTRA_CONFIG"])
    assert result["spec"]["hostNetwork"] is True
    assert result["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_mc_host_network_never_without_a_mooncake_connector(hook: Webhook) -> None:
    # [MC] "It is never granted to a pod that has nothing to use it for."
    hook.write(
        backend(remote=external("LMCacheServer", "x:1"), integration={"engineHostNetwork": True})
    )
    result, _ = hook.admit(pod())
    assert "hostNetwork" not in result["spec"]
    assert "dnsPolicy" not in result["spec"]
    events_only = backend("aaa", integration={"mode": "EventsOnly", "engineHostNetwork": True})
    hook.write(events_only)
    result, _ = hook.admit(pod())
    assert "hostNetwork" not in result["spec"]


@pytest.mark.parametrize(
    ("role", "kv_role"),
    [("ReadOnly", "kv_consumer"), ("WriteOnly", "kv_producer"), ("ReadWrite", "kv_both")],
)
def test_sgl_vllm_role_maps_to_kv_role(hook: Webhook, role: str, kv_role: str) -> None:
    # [SGL] "vLLM maps the role onto its LMCache connector's kv_role".
    hook.write(backend(integration={"role": role}))
    result, _ = hook.admit(pod())
    assert result == expect_vllm(pod(), role=kv_role)


def test_pw_fail_open_false_is_mirrored(hook: Webhook) -> None:
    # [RS] "INFERENCECACHE_FAIL_OPEN (mirror of spec.integration.failOpen)".
    hook.write(backend(integration={"failOpen": False}))
    result, _ = hook.admit(pod())
    assert result == expect_vllm(pod(), env=vllm_env(fail_open="false"))


def test_mc_lmcache_tunables_come_from_spec_lmcache(hook: Webhook) -> None:
    # [MC] "Chunk size, serializer, and host-memory settings come from spec.lmCache."
    hook.write(
        backend(
            remote=external("Mooncake", "m:50051"),
            lmCache={
                "chunkSizeTokens": 512,
                "hostMemory": {"capacity": "32Gi"},
                "remoteSerde": "cachegen",
            },
        )
    )
    result, _ = hook.admit(pod())
    assert result == expect_vllm(
        pod(),
        env=vllm_env(
            remote="mooncakestore://m:50051", chunk="512", cpu_size="32.0", serde="cachegen"
        ),
    )


def test_pw_existing_colliding_args_and_env_converge(hook: Webhook) -> None:
    # [PW] "Adapters preserve existing user args/env"; merge primitives "converge on the
    # desired value rather than appending a duplicate".
    engine = vllm(
        args=[
            "--model",
            MODEL,
            '--kv-transfer-config={"kv_connector":"NixlConnector","kv_role":"kv_both"}',
            "--max-model-len",
            "8192",
        ],
        env=[
            {"name": "HF_HOME", "value": "/cache"},
            {"name": "LMCACHE_CHUNK_SIZE", "value": "512"},
            {"name": "VLLM_USE_V1", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}},
        ],
    )
    hook.write(backend())
    result, _ = hook.admit(pod(engine))
    got = result["spec"]["containers"][0]
    # The pod's own connector is kept, first, with LMCache after it (MultiConnector).
    assert got["args"] == [
        "--model",
        MODEL,
        '--kv-transfer-config={"kv_connector":"MultiConnector","kv_role":"kv_both",'
        '"kv_connector_extra_config":{"connectors":[{"kv_connector":"NixlConnector",'
        '"kv_role":"kv_both"},{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}]}}',
        "--max-model-len",
        "8192",
    ]
    assert got["env"] == [
        {"name": "HF_HOME", "value": "/cache"},
        {"name": "LMCACHE_CHUNK_SIZE", "value": "256"},
        {"name": "VLLM_USE_V1", "value": "1"},
        {"name": "PYTHONHASHSEED", "value": "0"},
        {"name": "LMCACHE_LOCAL_CPU", "value": "True"},
        {"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": "4.0"},
        {"name": "INFERENCECACHE_FAIL_OPEN", "value": "true"},
        MULTIPROC_DIR,
    ]


def test_pw_host_only_keeps_the_templates_own_remote_url(hook: Webhook) -> None:
    # [PW] "Adapters preserve existing user args/env": host-only injects no URL.
    own = {"name": "LMCACHE_REMOTE_URL", "value": "lm://mine:1"}
    hook.write(backend())
    result, _ = hook.admit(pod(vllm(env=[own])))
    assert result["spec"]["containers"][0]["env"][0] == own


def test_pw_already_wired_pod_from_another_backend_converges(hook: Webhook) -> None:
    # [PW] Idempotency: the adapter "converge[s] the full injected contract".
    hook.write(backend(remote=external("LMCacheServer", "old:1"), uid="uid-old"))
    first, _ = hook.admit(pod())
    (hook.directory / "01-backends.yaml").unlink()
    hook.write(backend(remote=external("LMCacheServer", "new:2")))
    result, _ = hook.admit(first)
    assert result == expect_vllm(pod(), env=vllm_env(remote="lm://new:2"))


def test_pw_deployment_pod_metadata_untouched(hook: Webhook) -> None:
    # Pods from Deployments: generateName, ownerReferences and labels are not ours
    # (the labels added are the injected-by-uid selection label and the PodMonitor's).
    hook.write(backend())
    p = pod()
    result, _ = hook.admit(p)
    for key in ("generateName", "ownerReferences", "namespace"):
        assert result["metadata"][key] == p["metadata"][key]
    assert result["metadata"]["labels"] == {
        **p["metadata"]["labels"],
        UID_LABEL: UID,
        c.LABEL_METRICS: "engine",
    }
    assert "name" not in result["metadata"]


def test_pw_vllm_engine_container_chosen_among_several(hook: Webhook) -> None:
    sidecar = {"name": "proxy", "image": "envoyproxy/envoy:v1.30"}
    hook.write(backend())
    p = pod(sidecar, vllm())
    result, _ = hook.admit(p)
    assert result["spec"]["containers"][0] == sidecar
    assert result["spec"]["containers"][1]["args"][-2] == "--kv-transfer-config"


def test_pw_unsupported_binding_fails_open(hook: Webhook) -> None:
    # [PW] "Admission rejects unsupported combinations" — at pod admission, fail open.
    hook.write(backend(remote=managed("Redis"), status_endpoint="r:6379"))
    review_ok_without_patch(hook, pod(), reason="binding_not_supported")


def test_pw_no_registered_adapter_fails_open(hook: Webhook) -> None:
    # [PW] Fail-open: "no registered adapter".
    hook.write(backend(type_="SGLangHiCache", hiCache={"ratio": "2.0"}))  # VLLM/HiCache
    review_ok_without_patch(hook, pod(), reason="no_adapter")


def test_pw_invalid_backend_document_fails_open(hook: Webhook) -> None:
    hook.write(backend(runtime="TensorRT"))
    review_ok_without_patch(hook, pod(), reason="invalid_backend")


def test_pw_adapter_rejection_shell_wrapped_engine_fails_open(hook: Webhook) -> None:
    # [PW] Fail-open: "adapter rejection".
    hook.write(backend())
    engine = {"name": "vllm", "image": VLLM_IMAGE, "command": ["sh", "-c", "vllm serve m"]}
    review_ok_without_patch(hook, pod(engine), reason="adapter_rejected")


# =========================================================================== [KC]


def kernel_check(mode: str, image: str = VLLM_IMAGE) -> dict[str, Any]:
    return {
        "name": "lmcache-kernel-check",
        "image": image,
        "env": [{"name": "INFERENCECACHE_KERNEL_CHECK_MODE", "value": mode}],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
    }


@pytest.mark.parametrize(
    ("annotation", "resources", "mode"),
    [
        (None, GPU, "report-only"),  # auto (unset) + GPU limit
        (
            "auto",
            {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 2}},
            "report-only",
        ),
        ("auto", {"requests": {"nvidia.com/gpu": "1"}}, "report-only"),
        ("auto", {"limits": {"cpu": "4", "memory": "16Gi"}}, None),  # CPU build
        ("auto", {"limits": {"nvidia.com/gpu": "0"}}, None),
        ("report-only", None, "report-only"),
        ("strict", None, "strict"),
        ("strict", GPU, "strict"),
        ("off", GPU, None),
    ],
)
def test_kc_kernel_check_modes(
    hook: Webhook, annotation: str | None, resources: dict[str, Any] | None, mode: str | None
) -> None:
    # [KC] auto: "only when the engine container requests a GPU"; report-only/strict:
    # "Always inject"; off: "Never inject". The admitted mode is recorded on the pod.
    hook.write(backend(annotations={KERNEL_CHECK: annotation} if annotation else None))
    engine = vllm(resources=resources) if resources else vllm()
    result, _ = hook.admit(pod(engine))
    inits = result["spec"].get("initContainers") or []
    annotations = result["metadata"]["annotations"]
    if mode is None:
        assert inits == []
        assert KERNEL_CHECK_MODE not in annotations
        return
    assert len(inits) == 1
    check = inits[0]
    want = kernel_check(mode)
    assert {k: check[k] for k in want} == want
    # "runs the engine image's own python3", "deliberately not wrapped in a shell".
    assert check["command"][:2] == ["python3", "-c"]
    assert "limits" not in check["resources"]  # "small CPU/memory requests and no limits"
    assert "restartPolicy" not in check  # a normal init container, not a sidecar
    assert annotations[KERNEL_CHECK_MODE] == mode


def test_kc_check_goes_after_the_pods_own_init_containers(hook: Webhook) -> None:
    own = {"name": "download-model", "image": "busybox", "command": ["true"]}
    hook.write(backend(annotations={KERNEL_CHECK: "strict"}))
    result, _ = hook.admit(pod(vllm(imagePullPolicy="Always"), initContainers=[own]))
    inits = result["spec"]["initContainers"]
    assert inits[0] == own
    assert inits[1]["name"] == "lmcache-kernel-check"
    assert inits[1]["imagePullPolicy"] == "Always"


def test_kc_unrecognised_annotation_fails_open(hook: Webhook) -> None:
    # [KC] "an unrecognized value (e.g. a strcit typo) is rejected" — never relaxed.
    hook.write(backend(annotations={KERNEL_CHECK: "strcit"}))
    review_ok_without_patch(hook, pod(vllm(resources=GPU)), reason="adapter_rejected")


def test_kc_sglang_never_gets_the_check(hook: Webhook) -> None:
    # [KC] "inferencecache.io/lmcache-kernel-check has no effect on SGLang engine pods".
    hook.write(backend(runtime="SGLang", annotations={KERNEL_CHECK: "strict"}))
    result, _ = hook.admit(pod(sglang(resources=GPU)))
    names = [ic["name"] for ic in result["spec"]["initContainers"]]
    assert names == ["lmcache-mp-worker"]
    assert KERNEL_CHECK_MODE not in result["metadata"]["annotations"]


# ========================================================================== [SGL]


def expect_sglang(
    p: dict[str, Any],
    *,
    index: int = 0,
    worker_args: list[str] | None = None,
    fail_open: str = "true",
    dshm: dict[str, Any] | None = None,
    shm_mount: dict[str, Any] | None = None,
    key: str = f"{NS}/cache",
) -> dict[str, Any]:
    out = copy.deepcopy(p)
    engine = out["spec"]["containers"][index]
    engine["args"] = [
        *engine.get("args", []),
        "--enable-lmcache",
        "--lmcache-config-file",
        "/etc/lmcache/lmcache-mp.yaml",
    ]
    engine["env"] = [
        *engine.get("env", []),
        {"name": "LMCACHE_USE_EXPERIMENTAL", "value": "True"},
        {"name": "INFERENCECACHE_FAIL_OPEN", "value": fail_open},
    ]
    mounts = [{"name": "lmcache-config", "mountPath": "/etc/lmcache", "readOnly": True}]
    if shm_mount is None:
        mounts.append({"name": "lmcache-dshm", "mountPath": "/dev/shm"})
    engine["volumeMounts"] = [*engine.get("volumeMounts", []), *mounts]
    volumes = [{"name": "lmcache-config", "emptyDir": {}}]
    if shm_mount is None:
        volumes.append(
            dshm or {"name": "lmcache-dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}}
        )
    out["spec"]["volumes"] = [*out["spec"].get("volumes", []), *volumes]
    out["spec"]["containers"].append(subscriber(hash_scheme="sglang"))
    out["metadata"]["annotations"] = stamped(p, key)
    with_uid_label(out)
    ports = {c.ANNOTATION_CACHE_METRICS_PORT: "9090"}
    if "--enable-metrics" in engine["args"]:
        ports[c.ANNOTATION_METRICS_PORT] = flag_value(engine["args"], "--port", "30000")
    with_metrics_scrape(out, ports)
    inits = out["spec"].setdefault("initContainers", [])
    inits.append({"name": "lmcache-mp-worker"})  # compared by worker_shape()
    if worker_args is not None:
        inits[-1]["args"] = worker_args
    if shm_mount is not None:
        inits[-1]["shm"] = shm_mount
    return out


def worker_shape(result: dict[str, Any], want: dict[str, Any]) -> None:
    """Compare the pod with the worker init container checked field by field."""
    got_worker = result["spec"]["initContainers"][-1]
    want_worker = want["spec"]["initContainers"][-1]
    assert got_worker["name"] == "lmcache-mp-worker"
    # [SGL] "a node-local MP-worker native sidecar (an init container with restartPolicy:
    # Always)", "NVIDIA_VISIBLE_DEVICES=all", "an exec startup-probe on the loopback ZMQ
    # port", "a shared emptyDir carries the config file".
    assert got_worker["restartPolicy"] == "Always"
    env = {e["name"]: e.get("value") for e in got_worker["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "exec" in got_worker["startupProbe"]
    assert "tcpSocket" not in got_worker["startupProbe"]
    assert "nvidia.com/gpu" not in json.dumps(got_worker.get("resources") or {})
    mounts = {m["mountPath"]: m for m in got_worker["volumeMounts"]}
    assert mounts["/etc/lmcache"]["name"] == "lmcache-config"
    assert not mounts["/etc/lmcache"].get("readOnly")
    assert mounts["/dev/shm"] == want_worker.get(
        "shm", {"name": "lmcache-dshm", "mountPath": "/dev/shm"}
    )
    if "args" in want_worker:
        assert got_worker["args"] == want_worker["args"]
    rest = copy.deepcopy(result)
    rest["spec"]["initContainers"] = rest["spec"]["initContainers"][:-1]
    want_rest = copy.deepcopy(want)
    want_rest["spec"]["initContainers"] = want_rest["spec"]["initContainers"][:-1]
    for doc in (rest, want_rest):
        if not doc["spec"]["initContainers"]:
            del doc["spec"]["initContainers"]
    assert rest == want_rest


def host_only_worker_args(port: int = 5555, chunk: int = 256, l1: int = 4) -> list[str]:
    return [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chunk-size",
        str(chunk),
        "--l1-size-gb",
        str(l1),
        "--eviction-policy",
        "LRU",
    ]


def test_sgl_host_only_mp_wire(hook: Webhook) -> None:
    # [SGL] engine: --enable-lmcache, --lmcache-config-file, LMCACHE_USE_EXPERIMENTAL=True,
    # INFERENCECACHE_FAIL_OPEN; "without a binding it runs host-only" (no --l2-adapter).
    hook.write(backend(runtime="SGLang"))
    p = pod(sglang())
    result, _ = hook.admit(p)
    worker_shape(result, expect_sglang(p, worker_args=host_only_worker_args()))
    worker = result["spec"]["initContainers"][0]
    assert worker["image"] == SGLANG_IMAGE  # lmCache.workerImage default: engine image
    assert "--l2-adapter" not in worker["args"]
    env = {e["name"] for e in result["spec"]["containers"][0]["env"]}
    # [SGL] "Deliberately not injected for SGLang": VLLM_USE_V1, PYTHONHASHSEED, lm:// env.
    assert not env & {"VLLM_USE_V1", "PYTHONHASHSEED", "LMCACHE_REMOTE_URL", "LMCACHE_CHUNK_SIZE"}


def test_sgl_managed_redis_adds_the_l2_adapter(hook: Webhook) -> None:
    # [SGL] "With a RESP binding it appends --l2-adapter and offloads to Redis".
    hook.write(
        backend(
            runtime="SGLang",
            remote=managed("Redis"),
            status_endpoint="cache-redis.team-a.svc:6379",
            lmCache={"chunkSizeTokens": 128, "hostMemory": {"capacity": "32Gi"}},
        )
    )
    p = pod(sglang())
    result, _ = hook.admit(p)
    # The managed Redis requires the backend's password: the worker's secretKeyRef env
    # var LMCACHE_RESP_PASSWORD, which LMCache reads itself; never in the args
    # (tests/unit/tiers/test_tier_isolation.py).
    args = [
        *host_only_worker_args(chunk=128, l1=32),
        "--l2-adapter",
        '{"type":"resp","host":"cache-redis.team-a.svc","port":6379}',
    ]
    dshm = {"name": "lmcache-dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
    worker_shape(result, expect_sglang(p, worker_args=args, dshm=dshm))


def test_sgl_external_redis_and_worker_settings(hook: Webhook) -> None:
    hook.write(
        backend(
            runtime="SGLang",
            remote=external("Redis", " 10.0.0.5:6380 "),
            lmCache={"workerPort": 6000, "workerImage": "lmcache/vllm-openai:v0.3.9"},
            integration={"failOpen": False},
        )
    )
    p = pod(sglang())
    result, _ = hook.admit(p)
    args = [
        *host_only_worker_args(port=6000),
        "--l2-adapter",
        '{"type":"resp","host":"10.0.0.5","port":6380}',
    ]
    worker_shape(result, expect_sglang(p, worker_args=args, fail_open="false"))
    worker = result["spec"]["initContainers"][0]
    assert worker["image"] == "lmcache/vllm-openai:v0.3.9"
    assert worker["startupProbe"]["exec"]["command"][-1] == "6000"


def test_sgl_reuses_the_engines_own_dev_shm(hook: Webhook) -> None:
    # [SGL] "it reuses the engine's own volume when the engine already mounts one (a
    # duplicate mountPath is an invalid Pod), else adds a sized emptyDir{medium: Memory}".
    hook.write(backend(runtime="SGLang"))
    engine = sglang(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])
    p = pod(engine, volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory"}}])
    result, _ = hook.admit(p)
    want = expect_sglang(p, shm_mount={"name": "dshm", "mountPath": "/dev/shm"})
    worker_shape(result, want)
    assert "lmcache-dshm" not in json.dumps(result)


@pytest.mark.parametrize(
    ("mount", "volume"),
    [
        ({"name": "dshm", "mountPath": "/dev/shm", "readOnly": True}, {"emptyDir": {}}),
        ({"name": "dshm", "mountPath": "/dev/shm"}, {"configMap": {"name": "cm"}}),
        ({"name": "dshm", "mountPath": "/dev/shm/"}, {"secret": {"secretName": "s"}}),
        ({"name": "dshm", "mountPath": "/dev/shm"}, {"downwardAPI": {"items": []}}),
        ({"name": "dshm", "mountPath": "/dev/shm"}, {"projected": {"sources": []}}),
    ],
    ids=["read-only", "configMap", "secret", "downwardAPI", "projected"],
)
def test_sgl_unwritable_dev_shm_fails_open(
    hook: Webhook, mount: dict[str, Any], volume: dict[str, Any]
) -> None:
    # [SGL] "when the engine mounts /dev/shm read-only or from a configMap/secret/
    # downwardAPI/projected volume ... it is rejected at admission".
    hook.write(backend(runtime="SGLang"))
    review_ok_without_patch(
        hook,
        pod(sglang(volumeMounts=[mount]), volumes=[{"name": "dshm", **volume}]),
        reason="adapter_rejected",
    )


@pytest.mark.parametrize(
    "squat",
    [
        {"initContainers": [{"name": "lmcache-mp-worker", "image": "mine"}]},
        {"volumes": [{"name": "lmcache-config", "emptyDir": {}}]},
        {"volumes": [{"name": "lmcache-dshm", "emptyDir": {}}]},
        {
            "volumes": [{"name": "mine", "configMap": {"name": "lmcache"}}],
            "mount": {"name": "mine", "mountPath": "/etc/lmcache"},
        },
        {"extra": {"name": "lmcache-mp-worker", "image": "mine"}},
        {
            # The reserved mount path on a container other than the engine: no duplicate
            # mountPath on the engine, so only the reserved-name rule can catch it.
            "volumes": [{"name": "mine", "emptyDir": {}}],
            "extra": {
                "name": "helper",
                "image": "mine",
                "volumeMounts": [{"name": "mine", "mountPath": "/etc/lmcache"}],
            },
        },
    ],
    ids=[
        "init-container",
        "config-volume",
        "dshm-volume",
        "config-mount-path",
        "container",
        "config-mount-path-on-a-sidecar",
    ],
)
def test_sgl_reserved_name_squatting_fails_open(hook: Webhook, squat: dict[str, Any]) -> None:
    # [SGL] "If the pod already carries one of them and the adapter did not render it,
    # admission rejects the injection — which the pod webhook turns into a fail-open admit".
    hook.write(backend(runtime="SGLang"))
    engine = sglang()
    if "mount" in squat:
        engine["volumeMounts"] = [squat["mount"]]
    containers = [engine] + ([squat["extra"]] if "extra" in squat else [])
    spec = {k: v for k, v in squat.items() if k in ("initContainers", "volumes")}
    p = pod(*containers, annotations={INJECTED_BY: f"{NS}/x", "team/keep": "me"}, **spec)
    result, _ops = hook.admit(p)
    assert result["spec"] == p["spec"]
    assert result["metadata"]["annotations"] == {"team/keep": "me"}


def test_sgl_engine_container_naming_rule(hook: Webhook) -> None:
    # [HC]/[SGL] "A one-container Pod may use any container name; a multi-container Pod
    # must name its engine container sglang."
    hook.write(backend(runtime="SGLang"))
    single = pod(sglang("server"))
    result, _ = hook.admit(single)
    assert result["spec"]["containers"][0]["args"][-3] == "--enable-lmcache"
    router = {"name": "router", "image": "router:v1"}
    review_ok_without_patch(hook, pod(sglang("server"), router), reason="adapter_rejected")
    p = pod(router, sglang())
    result, _ = hook.admit(p)
    assert result["spec"]["containers"][0] == router
    worker_shape(result, expect_sglang(p, index=1))


def test_sgl_only_readwrite_and_only_resp_bindings(hook: Webhook) -> None:
    # [SGL] "a (sglang, LMCache) backend supports only ReadWrite"; "accepts either no
    # binding (host-only) or a RESP binding".
    hook.write(backend(runtime="SGLang", integration={"role": "ReadOnly"}))
    review_ok_without_patch(hook, pod(sglang()), reason="adapter_rejected")
    (hook.directory / "01-backends.yaml").unlink()
    hook.write(backend(runtime="SGLang", remote=external("LMCacheServer", "x:1")))
    review_ok_without_patch(hook, pod(sglang()), reason="binding_not_supported")


# =========================================================================== [HC]


def hicache_backend(**hi: Any) -> dict[str, Any]:
    return backend(runtime="SGLang", type_="SGLangHiCache", hiCache=hi)


def test_hc_ratio_only_appends_enable_and_ratio(hook: Webhook) -> None:
    # [HC] "The optional fields are injected only when present".
    hook.write(hicache_backend(ratio="2.0"))
    p = pod(sglang())
    result, _ = hook.admit(p)
    want = copy.deepcopy(p)
    want["spec"]["containers"][0]["args"] += [
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "2.0",
    ]
    want["spec"]["containers"].append(subscriber(hash_scheme="sglang"))
    want["metadata"]["annotations"] = stamped(p)
    with_uid_label(want)
    assert result == want  # no env, volumes, /dev/shm or init containers


def test_hc_size_and_every_optional_flag_in_order(hook: Webhook) -> None:
    hook.write(
        hicache_backend(
            sizeGB=64, writePolicy="write_through", ioBackend="kernel", memoryLayout="page_first"
        )
    )
    result, _ = hook.admit(pod(sglang("engine")))
    assert result["spec"]["containers"][0]["args"][4:] == [
        "--enable-hierarchical-cache",
        "--hicache-size",
        "64",
        "--hicache-write-policy",
        "write_through",
        "--hicache-io-backend",
        "kernel",
        "--hicache-mem-layout",
        "page_first",
    ]


def test_hc_matching_existing_arguments_kept_byte_for_byte(hook: Webhook) -> None:
    # [HC] "Existing matching arguments are left byte-for-byte unchanged."
    hook.write(hicache_backend(ratio="2.0", writePolicy="write_back"))
    engine = sglang(
        command=["python3", "-m", "sglang.launch_server", "--enable-hierarchical-cache"],
        args=["--model-path", MODEL, "--hicache-ratio=2", "--hicache-write-policy", "write_back"],
    )
    p = pod(engine)
    result, ops = hook.admit(p)
    assert result["spec"]["containers"][0] == engine
    assert all(
        op["path"].startswith(("/metadata/annotations", "/spec/containers/1"))
        or op["path"] in _LABEL_PATHS
        for op in ops
    )


def test_hc_operator_optional_flag_preserved(hook: Webhook) -> None:
    # [PW] HiCache "preserves one matching or well-formed operator-supplied value".
    hook.write(hicache_backend(sizeGB=8))
    engine = sglang(args=["--model-path", MODEL, "--hicache-io-backend", "direct"])
    result, _ = hook.admit(pod(engine))
    assert result["spec"]["containers"][0]["args"] == [
        "--model-path",
        MODEL,
        "--hicache-io-backend",
        "direct",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "8",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["--hicache-ratio", "3.0"],  # a different value
        ["--hicache-write-policy", "write_through"],  # different optional value
        ["--hicache-size", "64"],  # the opposite capacity mode
        ["--hicache-ratio"],  # malformed: no value
        ["--hicache-ratio", "--enable-hierarchical-cache"],  # malformed
        ["--hicache-ratio=", "--port", "1"],  # malformed: empty value
        ["--enable-hierarchical-cache=true"],  # malformed boolean
        ["--enable-hierarchical-cache", "--enable-hierarchical-cache"],  # duplicate
        ["--hicache-ratio", "2.0", "--hicache-ratio=2.0"],  # duplicate
        ["--enable-lmcache"],  # SGLang LMCache flags
        ["--lmcache-config-file", "/etc/lmcache/lmcache-mp.yaml"],
    ],
)
def test_hc_conflicts_fail_open_without_partial_wiring(hook: Webhook, args: list[str]) -> None:
    # [HC] "A different value, the opposite capacity mode, a malformed/duplicate argument,
    # or existing SGLang LMCache flags causes the whole injection to fail open without
    # partial HiCache wiring."
    hook.write(hicache_backend(ratio="2.0", writePolicy="write_back"))
    engine = sglang(args=["--model-path", MODEL, *args])
    p = pod(engine, annotations={INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE})
    result, _ = hook.admit(p)
    assert result["spec"] == p["spec"]
    assert result["metadata"].get("annotations", {}) == {}


def test_hc_remote_storage_and_naming_rule_fail_open(hook: Webhook) -> None:
    # [HC] "Native SGLang HiCache accepts only the nil host-only binding".
    bad = hicache_backend(ratio="2.0")
    bad["spec"]["remoteStorage"] = external("Redis", "r:6379")
    hook.write(bad)
    review_ok_without_patch(hook, pod(sglang()), reason="binding_not_supported")
    (hook.directory / "01-backends.yaml").unlink()
    hook.write(hicache_backend(ratio="2.0"))
    review_ok_without_patch(hook, pod(sglang("a"), sglang("b")), reason="adapter_rejected")


# =========================================================================== [EO]


def test_eo_events_only_appends_only_the_subscriber(hook: Webhook) -> None:
    # [EO] "The pod webhook does NOT inject the --kv-transfer-config arg or the LMCACHE_*
    # env"; "the webhook injects an events-only engine pod even though status.endpoint
    # is empty"; "Mode wins over host-tier configuration"; [SC] no
    # --ignore-block-removed in EventsOnly; [KC] "the lmcache-kernel-check init
    # container is never injected".
    hook.write(
        backend(
            integration={"mode": "EventsOnly"},
            lmCache={"chunkSizeTokens": 512},
            annotations={KERNEL_CHECK: "strict"},
        )
    )
    p = pod(vllm(resources=GPU))
    result, _ = hook.admit(p)
    want = copy.deepcopy(p)
    want["spec"]["containers"].append(subscriber(offload=False))
    want["metadata"]["annotations"] = stamped(p)
    with_uid_label(want)
    assert result == want


def test_eo_events_only_sglang_and_kv_events_port(hook: Webhook) -> None:
    # [SGL] "the adapter pins the sidecar's --hash-scheme=sglang"; [SC]
    # "--engine-endpoint=tcp://127.0.0.1:<engine kv-events port, default 5557>".
    hook.write(backend(runtime="SGLang", integration={"mode": "EventsOnly"}))
    config = '{"publisher":"zmq","endpoint":"tcp://*:6001","topic":"kv-events"}'
    p = pod(sglang(args=["--model-path", MODEL, "--kv-events-config", config]))
    result, _ = hook.admit(p)
    assert result["spec"]["containers"][1] == subscriber(
        hash_scheme="sglang", offload=False, port=6001
    )
    assert result["spec"]["containers"][0] == p["spec"]["containers"][0]


def test_eo_without_model_id_is_skipped_fail_open(hook: Webhook) -> None:
    # [EO] "skipped fail-open when either gate is unmet ... When skipped, the webhook
    # leaves the engine pod untouched and stamps no injected-by annotation."
    hook.write(backend(integration={"mode": "EventsOnly"}, model_id=None))
    review_ok_without_patch(hook, pod(), reason="events_only_no_subscriber")
    p = pod(annotations={INJECTED_BY: f"{NS}/cache", INJECTED_BY_UID: UID, "k": "v"})
    result, _ = hook.admit(p)
    assert result["metadata"]["annotations"] == {"k": "v"}
    assert result["spec"] == p["spec"]


def test_eo_without_subscriber_image_is_skipped_fail_open(tmp_path: Path) -> None:
    # [EO] "the controller must run with --kvevent-subscriber-image set (unset by
    # default, so a default install injects no subscriber)".
    hook = Webhook(tmp_path / "b", image=None)
    hook.write(backend(integration={"mode": "EventsOnly"}))
    review_ok_without_patch(hook, pod(), reason="events_only_no_subscriber")


def test_sc_offload_without_image_or_model_wires_without_subscriber(tmp_path: Path) -> None:
    # [SC] "image from the webhook's --kvevent-subscriber-image setting (unset: no sidecar)".
    hook = Webhook(tmp_path / "b", image=None)
    hook.write(backend())
    result, _ = hook.admit(pod())
    assert [ct["name"] for ct in result["spec"]["containers"]] == ["vllm"]
    assert result["metadata"]["annotations"][INJECTED_BY] == f"{NS}/cache"
    other = Webhook(tmp_path / "c")
    other.write(backend(model_id=None))
    result, _ = other.admit(pod())
    assert [ct["name"] for ct in result["spec"]["containers"]] == ["vllm"]


# ====================================================================== [PW] skip


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "t", "1", "yes", " on "])
def test_pw_skip_inject_truthy_opts_out(hook: Webhook, value: str) -> None:
    # [PW] "Reads inferencecache.io/skip-inject: <truthy> as an opt-out: ... skips engine
    # wiring, clears any stale injected-by/injected-by-uid pair, and stamps
    # inferencecache.io/inject-skipped: skip-inject-annotation".
    hook.write(backend())
    p = pod(annotations={SKIP_INJECT: value, INJECTED_BY: f"{NS}/cache", INJECTED_BY_UID: UID})
    result, _ = hook.admit(p)
    assert result["spec"] == p["spec"]
    assert result["metadata"]["annotations"] == {
        SKIP_INJECT: value,
        INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
    }


def test_pw_skip_inject_with_a_correct_marker_is_converged(hook: Webhook) -> None:
    # [PW] "skipInjection treats a pre-existing correct marker as already converged".
    hook.write(backend())
    review_ok_without_patch(
        hook,
        pod(annotations={SKIP_INJECT: "true", INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE}),
        reason="skip_inject_annotation",
    )


@pytest.mark.parametrize("value", ["false", "False", "0", "no", "off", ""])
def test_pw_skip_inject_falsy_wires_and_clears_a_stale_marker(hook: Webhook, value: str) -> None:
    # [PW] "Successful injection also clears any stale inferencecache.io/inject-skipped".
    hook.write(backend())
    p = pod(annotations={SKIP_INJECT: value, INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE})
    result, _ = hook.admit(p)
    assert result == expect_vllm(p)
    assert result["metadata"]["annotations"][SKIP_INJECT] == value


def test_pw_skip_inject_wins_even_when_listing_fails(hook: Webhook) -> None:
    hook.write_text("broken.yaml", "kind: [unclosed\n")
    result, _ = hook.admit(pod(annotations={SKIP_INJECT: "true", INJECTED_BY: f"{NS}/x"}))
    assert result["metadata"]["annotations"] == {
        SKIP_INJECT: "true",
        INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
    }


# ================================================================= [PW] fail-open


def test_pw_no_match_without_stale_annotations_has_no_patch(hook: Webhook) -> None:
    # [PW] "Every error path ... returns admission.Allowed(...)".
    hook.write(backend(selector={"app": "other"}))
    review_ok_without_patch(hook, pod(), reason="no_match")


def test_pw_no_match_strips_only_the_three_decision_annotations(hook: Webhook) -> None:
    # [PW] "the webhook strips stale injected-by/injected-by-uid and inject-skipped
    # annotations so a user cannot trick the events controller".
    hook.write(backend(selector={"app": "other"}))
    own = {"team/keep": "me", KERNEL_CHECK_MODE: "strict", SKIP_INJECT: "no"}
    p = pod(
        annotations={
            **own,
            INJECTED_BY: f"{NS}/cache",
            INJECTED_BY_UID: UID,
            INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
        }
    )
    result, ops = hook.admit(p)
    assert result["metadata"]["annotations"] == own
    assert result["spec"] == p["spec"]
    assert sorted(op["op"] for op in ops) == ["remove", "remove", "remove"]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_pw_only_create_is_wired(hook: Webhook, operation: str) -> None:
    # [PW] "Verbs: CREATE only."
    hook.write(backend())
    review_ok_without_patch(
        hook,
        pod(annotations={INJECTED_BY: "forged/x"}),
        operation=operation,
        reason="operation_not_create",
    )


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "not a pod",
        [1, 2],
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}, "spec": {}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"app": "engine"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": "x", "spec": {}},
    ],
    ids=["null", "string", "list", "deployment", "no-spec", "bad-metadata"],
)
def test_pw_undecodable_object_fails_open_without_patch(hook: Webhook, obj: Any) -> None:
    # [PW] "Decode failures fail open before a Pod exists to patch".
    hook.write(backend())
    review_ok_without_patch(hook, obj, reason="decode_error")


def test_pw_malformed_pod_spec_fails_open(hook: Webhook) -> None:
    hook.write(backend())
    bad = pod()
    bad["spec"]["containers"] = "vllm"
    review_ok_without_patch(hook, bad, reason="invalid_pod")
    bad["spec"]["containers"] = []
    review_ok_without_patch(hook, bad, reason="invalid_pod")


def test_pw_decoded_pod_without_containers_strips_stale_annotations(hook: Webhook) -> None:
    # [PW] "On all other fail-open returns after the pod is decoded ... the webhook strips
    # stale injected-by/injected-by-uid and inject-skipped annotations". A Pod with an
    # empty spec.containers decodes; nothing can be wired, and nothing may be vouched for.
    hook.write(backend())
    bad = pod(
        annotations={
            "team/keep": "me",
            INJECTED_BY: f"{NS}/cache",
            INJECTED_BY_UID: UID,
            INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
        }
    )
    bad["spec"]["containers"] = []
    result, ops = hook.admit(bad)
    assert result["metadata"]["annotations"] == {"team/keep": "me"}
    assert result["spec"] == bad["spec"]
    assert all(op["path"].startswith("/metadata/annotations") for op in ops)


@pytest.mark.parametrize("break_it", ["bad-yaml", "missing-dir"])
def test_pw_list_error_fails_open_and_strips(tmp_path: Path, break_it: str) -> None:
    # [PW] "Every error path (decode failure, list error, ...) returns admission.Allowed".
    hook = Webhook(tmp_path / "b")
    hook.write(backend())
    if break_it == "bad-yaml":
        hook.write_text("zz-broken.yaml", "apiVersion: [unclosed\n")
    else:
        for path in hook.directory.iterdir():
            path.unlink()
        hook.directory.rmdir()
    review_ok_without_patch(hook, pod(), reason="list_error")
    result, _ = hook.admit(pod(annotations={INJECTED_BY: f"{NS}/cache", "k": "v"}))
    assert result["metadata"]["annotations"] == {"k": "v"}


# ========================================================================== [OV]


def overrides_backend(**overrides: Any) -> dict[str, Any]:
    return backend(integration={"engineOverrides": overrides})


def engine_of(result: dict[str, Any]) -> dict[str, Any]:
    engine: dict[str, Any] = result["spec"]["containers"][0]
    return engine


def test_ov_env_override_of_adapter_owned_name_wins_in_place(hook: Webhook) -> None:
    # [OV] env: "An override of an adapter-owned name wins".
    hook.write(overrides_backend(env=[{"name": "LMCACHE_CHUNK_SIZE", "value": "1024"}]))
    result, _ = hook.admit(pod())
    env = [e for e in vllm_env()]
    env[2] = {"name": "LMCACHE_CHUNK_SIZE", "value": "1024"}
    assert result == expect_vllm(pod(), env=env)


@pytest.mark.parametrize("amend", ["env", "suppressEnv"])
def test_ov_env_amends_the_default_remote_serde(hook: Webhook, amend: str) -> None:
    # LMCACHE_REMOTE_SERDE is always injected with a remote binding
    # (default naive), and stays an adapter-owned, non-reserved tunable: engineOverrides
    # can still replace or suppress it.
    override: Any = (
        [{"name": "LMCACHE_REMOTE_SERDE", "value": "cachegen"}]
        if amend == "env"
        else ["LMCACHE_REMOTE_SERDE"]
    )
    hook.write(
        backend(
            remote=managed("LMCacheServer"),
            status_endpoint="cache-lmcache-server.team-a.svc:65432",
            integration={"engineOverrides": {amend: override}},
        )
    )
    result, _ = hook.admit(pod())
    env = vllm_env(remote="lm://cache-lmcache-server.team-a.svc:65432")
    assert env[-1] == {"name": "LMCACHE_REMOTE_SERDE", "value": "naive"}
    env = env[:-1] + (
        [{"name": "LMCACHE_REMOTE_SERDE", "value": "cachegen"}] if amend == "env" else []
    )
    assert result == expect_vllm(pod(), env=env)


def test_ov_env_new_name_is_appended(hook: Webhook) -> None:
    # [OV] env: "a new name (not on the user template) is appended".
    extra = {"name": "LMCACHE_SAVE_DECODE_CACHE", "value": "True"}
    secret = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}
    hook.write(overrides_backend(env=[extra, secret]))
    result, _ = hook.admit(pod())
    assert result == expect_vllm(pod(), env=[*vllm_env(), MULTIPROC_DIR, extra, secret])


def test_ov_env_override_the_api_server_would_reject_fails_open(hook: Webhook) -> None:
    # [PW] Fail-open: "webhook errors MUST NOT block engine admission". An env name
    # containing "=" is invalid under both the strict and the relaxed Kubernetes env-name
    # rules, so wiring it would get the Pod rejected: the pod is admitted unwired
    # instead, and stale decision annotations are stripped.
    hook.write(overrides_backend(env=[{"name": "A=B", "value": "1"}]))
    review_ok_without_patch(hook, pod(), reason="invalid_result")
    stale = pod(annotations={INJECTED_BY: f"{NS}/cache", INJECTED_BY_UID: UID})
    result, _ = hook.admit(stale)
    assert result["metadata"].get("annotations", {}) == {}
    assert result["spec"] == stale["spec"]


def test_ov_env_colliding_with_user_env_is_a_silent_no_op(hook: Webhook) -> None:
    # [OV] env: "a name colliding with a user-owned env the adapter did not touch is a
    # silent no-op" — "the user template protected".
    hook.write(overrides_backend(env=[{"name": "HF_HOME", "value": "/cr"}]))
    own = {"name": "HF_HOME", "value": "/mine"}
    p = pod(vllm(env=[own]))
    result, _ = hook.admit(p)
    assert result == expect_vllm(p)


def test_ov_env_override_of_a_user_value_the_adapter_modified(hook: Webhook) -> None:
    # [OV] "A flag/env is adapter-owned if the adapter added it OR modified an existing
    # value."
    hook.write(overrides_backend(env=[{"name": "LMCACHE_CHUNK_SIZE", "value": "64"}]))
    p = pod(vllm(env=[{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}]))
    result, _ = hook.admit(p)
    assert engine_of(result)["env"][0] == {"name": "LMCACHE_CHUNK_SIZE", "value": "64"}


def test_ov_suppress_env(hook: Webhook) -> None:
    # [OV] suppressEnv: "Env var Names the adapter MUST NOT inject. Restricted to
    # adapter-owned entries; user-owned env is protected."
    hook.write(
        overrides_backend(suppressEnv=["LMCACHE_LOCAL_CPU", "LMCACHE_CHUNK_SIZE", "HF_HOME"])
    )
    p = pod(
        vllm(
            env=[
                {"name": "HF_HOME", "value": "/mine"},
                {"name": "LMCACHE_CHUNK_SIZE", "value": "512"},
            ]
        )
    )
    result, _ = hook.admit(p)
    env = engine_of(result)["env"]
    names = [e["name"] for e in env]
    assert "LMCACHE_LOCAL_CPU" not in names  # adapter-added: not injected
    assert env[0] == {"name": "HF_HOME", "value": "/mine"}  # user-owned: protected
    # modified by the adapter: not injected, so the template's own value stays
    assert env[1] == {"name": "LMCACHE_CHUNK_SIZE", "value": "512"}
    assert names.count("LMCACHE_CHUNK_SIZE") == 1


def test_ov_args_appended_in_order_and_user_flags_protected(hook: Webhook) -> None:
    # [OV] args: "an entry whose token is in neither the adapter-owned set nor the user
    # pod-template is appended; an entry colliding with a user-template flag the adapter
    # did not touch is a silent no-op. Order preserved."
    hook.write(
        overrides_backend(
            args=[
                "--max-model-len=4096",
                "--port=9999",  # the user's flag: no-op
                "--gpu-memory-utilization",
                "0.8",
                "--enable-prefix-caching",
            ],
            suppressArgs=["--model"],  # the user's flag: no-op
        )
    )
    p = pod()
    result, _ = hook.admit(p)
    assert engine_of(result)["args"] == [
        "--model",
        MODEL,
        "--port",
        "8000",
        "--kv-transfer-config",
        CONNECTOR.format("kv_both"),
        "--max-model-len=4096",
        "--gpu-memory-utilization",
        "0.8",
        "--enable-prefix-caching",
    ]


def test_ov_reserved_overrides_never_unwire(hook: Webhook) -> None:
    # [RS] reserved args/env "the user MUST NOT override or suppress".
    hook.write(
        overrides_backend(
            args=['--kv-transfer-config={"kv_connector":"NixlConnector"}'],
            suppressArgs=["--kv-transfer-config"],
            env=[{"name": "VLLM_USE_V1", "value": "0"}],
            suppressEnv=["PYTHONHASHSEED", "INFERENCECACHE_FAIL_OPEN", "LMCACHE_REMOTE_URL"],
        )
    )
    result, _ = hook.admit(pod())
    assert result == expect_vllm(pod())


def test_ov_sglang_overrides_touch_only_the_engine_container(hook: Webhook) -> None:
    # [SGL] "spec.lmCache shapes the worker sidecar, while spec.integration.engineOverrides
    # edits the engine container's args/env only."
    hook.write(
        backend(
            runtime="SGLang",
            integration={
                "engineOverrides": {
                    "args": ["--page-size=64"],
                    "env": [{"name": "SGLANG_X", "value": "1"}],
                    "suppressEnv": ["LMCACHE_USE_EXPERIMENTAL"],  # reserved
                }
            },
        )
    )
    p = pod(sglang())
    result, _ = hook.admit(p)
    engine = engine_of(result)
    assert engine["args"][-1] == "--page-size=64"
    assert env_of(engine) == {
        "LMCACHE_USE_EXPERIMENTAL": "True",
        "INFERENCECACHE_FAIL_OPEN": "true",
        "SGLANG_X": "1",
    }
    assert "SGLANG_X" not in json.dumps(result["spec"]["initContainers"])


def test_ov_no_overrides_block_renders_the_same_patch(hook: Webhook, tmp_path: Path) -> None:
    # [OV] "a CacheBackend with no engineOverrides block renders the same injected patch".
    hook.write(backend())
    other = Webhook(tmp_path / "other")
    other.write(overrides_backend())
    assert ops_of(hook.post(pod())) == ops_of(other.post(pod()))


def test_ov_events_only_ignores_overrides(hook: Webhook) -> None:
    # [EO] "the engine container is left otherwise untouched".
    hook.write(
        backend(
            integration={
                "mode": "EventsOnly",
                "engineOverrides": {"env": [{"name": "X", "value": "1"}], "args": ["--y=1"]},
            }
        )
    )
    p = pod()
    result, _ = hook.admit(p)
    assert result["spec"]["containers"][0] == p["spec"]["containers"][0]


def test_ov_hicache_flags_are_adapter_owned_and_amendable(hook: Webhook) -> None:
    # [OV] args: "An entry whose leading flag token matches an adapter-owned canonical arg
    # replaces it"; [RS] "each engine guards only the flags/env its own integration
    # cannot function without" — for HiCache that is --enable-hierarchical-cache alone.
    hook.write(
        backend(
            runtime="SGLang",
            type_="SGLangHiCache",
            hiCache={"ratio": "2.0", "writePolicy": "write_through", "ioBackend": "kernel"},
            integration={
                "engineOverrides": {
                    "args": ["--hicache-write-policy=write_back", "--hicache-size", "16"],
                    "suppressArgs": ["--hicache-io-backend", "--enable-hierarchical-cache"],
                }
            },
        )
    )
    p = pod(sglang())
    result, _ = hook.admit(p)  # re-admission converges: no patch
    assert engine_of(result)["args"] == [
        "--model-path",
        MODEL,
        "--port",
        "30000",
        "--enable-hierarchical-cache",  # reserved: never suppressed
        "--hicache-ratio",
        "2.0",
        "--hicache-write-policy=write_back",  # replaced in place
        "--hicache-size",  # new flag: appended
        "16",
    ]


def test_ov_hicache_override_never_rewrites_the_templates_own_flag(hook: Webhook) -> None:
    # [OV] "an entry colliding with a user-template flag the adapter did not touch is a
    # silent no-op"; [HC] the matching template argument stays byte for byte.
    hook.write(
        backend(
            runtime="SGLang",
            type_="SGLangHiCache",
            hiCache={"sizeGB": 8, "writePolicy": "write_through"},
            integration={"engineOverrides": {"args": ["--hicache-write-policy=write_back"]}},
        )
    )
    engine = sglang(args=["--hicache-write-policy", "write_through"])
    result, _ = hook.admit(pod(engine))
    assert engine_of(result)["args"] == [
        "--hicache-write-policy",
        "write_through",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "8",
    ]


def test_pw_backend_without_uid_still_stamps_both_annotations(hook: Webhook) -> None:
    # [PW] "Stamps TWO annotations on every successfully mutated pod"; a file without
    # metadata.uid gives an empty uid, never a stale pre-stamped one.
    hook.write(backend(uid=None))
    p = pod(annotations={INJECTED_BY_UID: "forged"})
    result, _ = hook.admit(p)
    assert result["metadata"]["annotations"] == {
        INJECTED_BY: f"{NS}/cache",
        INJECTED_BY_UID: "",
        c.ANNOTATION_METRICS_PORT: "8000",
    }
    assert result["spec"] == expect_vllm(pod())["spec"]
