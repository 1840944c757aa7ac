"""VLLM + LMCache adapter: the engine wire of the spec, per rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shared.bindings import Binding
from shared.runtime_adapters.base import InjectionRejectedError
from shared.runtime_adapters.registry import select_adapter
from shared.runtime_adapters.sizing import gib_decimal_string
from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter
from tests.builders import (
    Injector,
    assert_valid_pod,
    containers_of,
    env_of,
    init_containers_of,
)
from tests.builders import container as make_container
from tests.builders import parsed_backend as backend
from tests.builders import pod as make_pod

ADAPTER = VLLMLMCacheAdapter()
LM = Binding("lm", "cache.team-a.svc:65432")
MOONCAKE = Binding("mooncakestore", "mc.team-a.svc:50051")


inject = Injector(ADAPTER, backend)


def engine_of(pod: dict[str, Any], name: str = "vllm") -> dict[str, Any]:
    return containers_of(pod)[name]


def test_registry_selects_vllm_lmcache_adapter() -> None:
    assert isinstance(select_adapter("VLLM", "LMCache"), VLLMLMCacheAdapter)


def test_declared_reserved_args_env_and_protocols() -> None:
    assert ADAPTER.reserved_args == (
        "--kv-transfer-config",
        "--kv-offloading-size",
        "--kv-offloading-backend",
    )
    assert set(ADAPTER.reserved_env) == {
        "VLLM_USE_V1",
        "LMCACHE_REMOTE_URL",
        "INFERENCECACHE_FAIL_OPEN",
        "PYTHONHASHSEED",
    }
    assert ADAPTER.supports_binding(None)
    assert ADAPTER.supports_binding(LM)
    assert ADAPTER.supports_binding(MOONCAKE)
    assert not ADAPTER.supports_binding(Binding("resp", "redis:6379"))


@pytest.mark.parametrize(
    ("role", "kv_role"),
    [
        (None, "kv_both"),
        ("ReadWrite", "kv_both"),
        ("ReadOnly", "kv_consumer"),
        ("WriteOnly", "kv_producer"),
    ],
)
def test_kv_transfer_config_maps_role_to_kv_role(role: str | None, kv_role: str) -> None:
    cb = backend(integration={"role": role} if role else None)
    args = engine_of(inject(make_pod(), cb))["args"]
    i = args.index("--kv-transfer-config")
    assert json.loads(args[i + 1]) == {"kv_connector": "LMCacheConnectorV1", "kv_role": kv_role}
    assert args[i + 1] == json.dumps(
        {"kv_connector": "LMCacheConnectorV1", "kv_role": kv_role}, separators=(",", ":")
    )


def test_remote_url_lm_binding() -> None:
    env = env_of(engine_of(inject(make_pod(), binding=LM)))
    assert env["LMCACHE_REMOTE_URL"] == "lm://cache.team-a.svc:65432"


def test_remote_url_mooncakestore_binding() -> None:
    env = env_of(engine_of(inject(make_pod(), binding=MOONCAKE)))
    assert env["LMCACHE_REMOTE_URL"] == "mooncakestore://mc.team-a.svc:50051"


@pytest.mark.parametrize(
    ("binding", "url"),
    [
        (Binding("lm", "lm://h:1"), "lm://h:1"),
        (Binding("mooncakestore", "mooncakestore://h:2"), "mooncakestore://h:2"),
    ],
)
def test_remote_url_scheme_never_doubled(binding: Binding, url: str) -> None:
    assert env_of(engine_of(inject(make_pod(), binding=binding)))["LMCACHE_REMOTE_URL"] == url


def test_host_only_injects_no_remote_url_and_keeps_the_templates_own() -> None:
    # Spec: "Adapters preserve existing user args/env"; host-only injects no remote URL.
    assert "LMCACHE_REMOTE_URL" not in env_of(engine_of(inject(make_pod())))
    own = make_container(env=[{"name": "LMCACHE_REMOTE_URL", "value": "lm://own:1"}])
    assert env_of(engine_of(inject(make_pod(own))))["LMCACHE_REMOTE_URL"] == "lm://own:1"


def test_chunk_size_default_and_configured() -> None:
    assert env_of(engine_of(inject(make_pod())))["LMCACHE_CHUNK_SIZE"] == "256"
    cb = backend(lmCache={"chunkSizeTokens": 1024})
    assert env_of(engine_of(inject(make_pod(), cb)))["LMCACHE_CHUNK_SIZE"] == "1024"


@pytest.mark.parametrize("binding", [LM, MOONCAKE], ids=["lm", "mooncake"])
def test_remote_serde_always_injected_with_a_remote_binding(binding: Binding) -> None:
    """With a remote binding the engine env names the serializer, from
    spec.lmCache.remoteSerde or the documented default naive (LMCache's own default
    changed between releases)."""
    assert env_of(engine_of(inject(make_pod(), binding=binding)))["LMCACHE_REMOTE_SERDE"] == (
        "naive"
    )
    cb = backend(lmCache={"remoteSerde": "cachegen"})
    assert env_of(engine_of(inject(make_pod(), cb, binding)))["LMCACHE_REMOTE_SERDE"] == (
        "cachegen"
    )


def test_remote_serde_host_only_only_when_set() -> None:
    """Host-only has no remote tier to serialise for: only an explicit value is passed."""
    assert "LMCACHE_REMOTE_SERDE" not in env_of(engine_of(inject(make_pod())))
    cb = backend(lmCache={"remoteSerde": "cachegen"})
    assert env_of(engine_of(inject(make_pod(), cb)))["LMCACHE_REMOTE_SERDE"] == "cachegen"


@pytest.mark.parametrize("binding", [None, LM, MOONCAKE], ids=["host-only", "lm", "mooncake"])
def test_local_cpu_tier_is_set_for_every_binding(binding: Binding | None) -> None:
    env = env_of(engine_of(inject(make_pod(), binding=binding)))
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "4.0"  # default 4Gi


def test_max_local_cpu_size_from_host_memory_capacity() -> None:
    cb = backend(lmCache={"hostMemory": {"capacity": "32Gi"}})
    assert env_of(engine_of(inject(make_pod(), cb)))["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "32.0"


@pytest.mark.parametrize(
    ("capacity", "gb"),
    [(4 * 1024**3, "4.0"), (1536 * 1024**2, "1.5"), (500 * 10**6, "0.465"), (1024, "0.001")],
)
def test_max_local_cpu_size_is_gib_float_truncated(capacity: int, gb: str) -> None:
    from decimal import Decimal

    assert gib_decimal_string(Decimal(capacity)) == gb


def test_malformed_host_memory_capacity_is_rejected() -> None:
    cb = backend(lmCache={"hostMemory": {"capacity": "lots"}})
    with pytest.raises(InjectionRejectedError):
        inject(make_pod(), cb)


def test_vllm_use_v1_pythonhashseed_and_fail_open_mirror() -> None:
    env = env_of(engine_of(inject(make_pod())))
    assert env["VLLM_USE_V1"] == "1"
    assert env["PYTHONHASHSEED"] == "0"
    assert env["INFERENCECACHE_FAIL_OPEN"] == "true"
    closed = backend(integration={"failOpen": False})
    assert env_of(engine_of(inject(make_pod(), closed)))["INFERENCECACHE_FAIL_OPEN"] == "false"


@pytest.mark.parametrize(
    ("args", "injected"),
    [
        (["--model", "m"], True),
        (["--fail-on-environ-validation"], False),
        (["--fail-on-environ-validation", "--no-fail-on-environ-validation"], True),
        (["--no-fail-on-environ-validation", "--fail-on-environ-validation"], False),
    ],
)
def test_vllm_use_v1_is_left_out_when_vllm_fails_on_unknown_env(
    args: list[str], injected: bool
) -> None:
    """Engine fact: vLLM 0.33.0's envs.py no longer knows VLLM_USE_V1, and with
    --fail-on-environ-validation (argparse BooleanOptionalAction, the last one wins)
    validate_environ raises "Unknown vLLM environment variable detected" at startup."""
    env = env_of(engine_of(inject(make_pod(make_container(args=args)))))
    assert ("VLLM_USE_V1" in env) is injected


def test_vllm_use_v1_is_left_out_when_an_override_asks_vllm_to_fail_on_unknown_env() -> None:
    cb = backend(integration={"engineOverrides": {"args": ["--fail-on-environ-validation"]}})
    assert "VLLM_USE_V1" not in env_of(engine_of(inject(make_pod(), cb)))


def test_vllm_use_v1_of_the_template_is_the_operators_when_left_out() -> None:
    own = make_container(
        args=["--fail-on-environ-validation"], env=[{"name": "VLLM_USE_V1", "value": "1"}]
    )
    assert env_of(engine_of(inject(make_pod(own))))["VLLM_USE_V1"] == "1"


# ------------------------------------------------------------- container selection


def test_engine_selection_prefers_container_named_vllm() -> None:
    pod = make_pod(make_container("proxy", image="envoy"), make_container("vllm", image="custom"))
    out = inject(pod)
    assert "env" not in containers_of(out)["proxy"]
    assert "--kv-transfer-config" in containers_of(out)["vllm"]["args"]


def test_engine_selection_single_container_any_name() -> None:
    out = inject(make_pod(make_container("server", image="my/engine")))
    assert "--kv-transfer-config" in containers_of(out)["server"]["args"]


def test_engine_selection_the_one_container_mentioning_vllm() -> None:
    pod = make_pod(
        make_container("proxy", image="envoy"),
        make_container("engine", image="registry/llm", command=["vllm", "serve", "m"]),
    )
    out = inject(pod)
    assert "--kv-transfer-config" in containers_of(out)["engine"]["args"]


@pytest.mark.parametrize(
    "containers",
    [
        [make_container("a", image="envoy"), make_container("b", image="nginx")],
        [make_container("a", image="vllm/x"), make_container("b", image="vllm/y")],
    ],
    ids=["none-mentions-vllm", "several-mention-vllm"],
)
def test_engine_selection_ambiguous_is_rejected(containers: list[dict[str, Any]]) -> None:
    with pytest.raises(InjectionRejectedError, match="name it 'vllm'"):
        inject(make_pod(*containers))


def test_engine_selection_ignores_the_webhooks_subscriber() -> None:
    pod = make_pod(
        make_container("server", image="x"), make_container("kvevent-subscriber", image="sub")
    )
    out = inject(pod)
    assert "--kv-transfer-config" in containers_of(out)["server"]["args"]


# ------------------------------------------------------------- merge behaviour


def test_existing_user_args_and_env_preserved() -> None:
    engine = make_container(
        args=["--model", "Qwen/Qwen3-8B", "--port", "8000"],
        env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}],
    )
    out = engine_of(inject(make_pod(engine)))
    assert out["args"][:4] == ["--model", "Qwen/Qwen3-8B", "--port", "8000"]
    assert out["env"][0] == engine["env"][0]


def test_existing_kv_transfer_config_eq_form_is_converged_in_place() -> None:
    engine = make_container(
        args=[
            '--kv-transfer-config={"kv_connector":"LMCacheConnectorV1","kv_role":"kv_consumer"}',
            "--port",
            "8000",
        ]
    )
    out = engine_of(inject(make_pod(engine)))
    assert out["args"][0].startswith("--kv-transfer-config=")
    assert json.loads(out["args"][0].split("=", 1)[1])["kv_connector"] == "LMCacheConnectorV1"
    assert out["args"][1:] == ["--port", "8000"]


def test_duplicate_kv_transfer_config_converges_to_one() -> None:
    engine = make_container(args=["--kv-transfer-config", "{}", "--x", "--kv-transfer-config={}"])
    out = engine_of(inject(make_pod(engine)))
    assert sum(a.startswith("--kv-transfer-config") for a in out["args"]) == 1


def test_user_env_of_an_injected_name_is_converged_not_duplicated() -> None:
    engine = make_container(
        env=[
            {"name": "LMCACHE_CHUNK_SIZE", "value": "128"},
            {"name": "LMCACHE_CHUNK_SIZE", "value": "64"},
        ]
    )
    out = engine_of(inject(make_pod(engine)))
    assert [e for e in out["env"] if e["name"] == "LMCACHE_CHUNK_SIZE"] == [
        {"name": "LMCACHE_CHUNK_SIZE", "value": "256"}
    ]


def test_command_only_cli_gets_args_appended() -> None:
    """Kubernetes appends args to command, so `command: [vllm, serve, m]` still works."""
    engine = make_container(command=["vllm", "serve", "Qwen/Qwen3-8B"])
    out = engine_of(inject(make_pod(engine)))
    assert out["command"] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    assert out["args"][0] == "--kv-transfer-config"


def test_flag_already_in_command_is_converged_there() -> None:
    engine = make_container(command=["vllm", "serve", "m", "--kv-transfer-config", "{}"])
    out = engine_of(inject(make_pod(engine)))
    assert "args" not in out
    assert json.loads(out["command"][4])["kv_connector"] == "LMCacheConnectorV1"


@pytest.mark.parametrize(
    "engine",
    [
        make_container(command=["sh", "-c", "vllm serve m"]),
        make_container(command=["/bin/bash"], args=["-ec", "vllm serve m"]),
    ],
)
def test_shell_script_engine_is_rejected(engine: dict[str, Any]) -> None:
    with pytest.raises(InjectionRejectedError, match="shell script"):
        inject(make_pod(engine))


def test_repeat_injection_is_idempotent() -> None:
    cb = backend(annotations={"inferencecache.io/lmcache-kernel-check": "strict"})
    once = inject(make_pod(make_container(args=["--model", "m"])), cb, LM)
    assert inject(once, cb, LM) == once


def test_inject_never_mutates_its_input() -> None:
    pod = make_pod(make_container(args=["--model", "m"], env=[{"name": "A", "value": "1"}]))
    before = copy.deepcopy(pod)
    inject(pod, binding=LM)
    assert pod == before


def test_unsupported_binding_is_rejected() -> None:
    with pytest.raises(InjectionRejectedError):
        inject(make_pod(), binding=Binding("resp", "redis:6379"))


def test_wired_pod_passes_pod_validation_basics() -> None:
    engine = make_container(resources={"limits": {"nvidia.com/gpu": "1"}})
    out = inject(
        make_pod(engine, initContainers=[make_container("fetch", image="busybox")]), binding=LM
    )
    assert_valid_pod(out)
    assert list(init_containers_of(out)) == ["fetch", "lmcache-kernel-check"]


# ------------------------------------------------------------ Mooncake extra config
#
# Engine fact (LMCache 0.4.7 and 0.5.6): MooncakestoreConnectorAdapter.create_connector
# never reads the mooncakestore:// URL's address; MooncakestoreConnector takes its setup
# from MOONCAKE_CONFIG_PATH or LMCache's extra_config (load_from_lmcache_config raises
# "The extra config is not set." without it), and lmcache/v1/config.py reads
# LMCACHE_EXTRA_CONFIG with json.loads. So the master address must travel in that JSON.

EXTRA = "LMCACHE_EXTRA_CONFIG"
POD_IP = "INFERENCECACHE_POD_IP"


def env_names(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container.get("env") or []]


def extra_config(container: dict[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(env_of(container)[EXTRA])
    return parsed


def test_mooncake_binding_carries_the_master_address_in_extra_config() -> None:
    engine = engine_of(inject(make_pod(), binding=MOONCAKE))
    assert extra_config(engine) == {
        "master_server_address": "mc.team-a.svc:50051",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "tcp",
        "local_hostname": f"$({POD_IP})",
    }
    # The spec's URL stays: LMCache picks the Mooncake connector by its scheme.
    assert env_of(engine)["LMCACHE_REMOTE_URL"] == "mooncakestore://mc.team-a.svc:50051"


def test_mooncake_master_address_never_carries_the_scheme() -> None:
    engine = engine_of(inject(make_pod(), binding=Binding("mooncakestore", "mooncakestore://h:2")))
    assert extra_config(engine)["master_server_address"] == "h:2"


def test_pod_ip_comes_from_the_downward_api_before_the_extra_config() -> None:
    """Kubernetes expands $(VAR) only from variables defined earlier in the container."""
    engine = engine_of(inject(make_pod(), binding=MOONCAKE))
    names = env_names(engine)
    assert names.index(POD_IP) < names.index(EXTRA)
    assert env_of(engine)[POD_IP] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}


def test_pod_ip_is_moved_before_an_extra_config_the_template_lists_first() -> None:
    own = make_container(
        env=[
            {"name": EXTRA, "value": '{"protocol":"rdma"}'},
            {"name": POD_IP, "value": "stale"},
        ]
    )
    engine = engine_of(inject(make_pod(own), binding=MOONCAKE))
    names = env_names(engine)
    assert names.count(POD_IP) == 1
    assert names.index(POD_IP) == names.index(EXTRA) - 1
    assert "value" not in engine["env"][names.index(POD_IP)]


@pytest.mark.parametrize("binding", [None, LM], ids=["host-only", "lm"])
def test_only_a_mooncake_binding_gets_extra_config(binding: Binding | None) -> None:
    env = env_of(engine_of(inject(make_pod(), binding=binding)))
    assert EXTRA not in env
    assert POD_IP not in env
    own = make_container(env=[{"name": EXTRA, "value": "not json: not ours to judge"}])
    assert env_of(engine_of(inject(make_pod(own), binding=binding)))[EXTRA] == (
        "not json: not ours to judge"
    )


def test_templates_extra_config_is_merged_its_keys_win_but_the_master_is_ours() -> None:
    own = make_container(
        env=[
            {
                "name": EXTRA,
                "value": json.dumps(
                    {
                        "protocol": "rdma",
                        "device_name": "mlx5_0",
                        "metadata_server": "http://mc:8080/metadata",
                        "master_server_address": "elsewhere:1",
                        "mooncake_master_server_address": "elsewhere:2",
                        "global_segment_size": 1,
                    }
                ),
            }
        ]
    )
    assert extra_config(engine_of(inject(make_pod(own), binding=MOONCAKE))) == {
        "protocol": "rdma",
        "device_name": "mlx5_0",
        "metadata_server": "http://mc:8080/metadata",
        "master_server_address": "mc.team-a.svc:50051",
        "global_segment_size": 1,
        "local_hostname": f"$({POD_IP})",
    }


def test_engine_overrides_extra_config_is_merged_over_the_templates() -> None:
    own = make_container(env=[{"name": EXTRA, "value": '{"protocol":"rdma","device_name":"a"}'}])
    cb = backend(
        integration={
            "engineOverrides": {"env": [{"name": EXTRA, "value": '{"device_name":"mlx5_1"}'}]}
        }
    )
    got = extra_config(engine_of(inject(make_pod(own), cb, MOONCAKE)))
    assert got["protocol"] == "rdma"
    assert got["device_name"] == "mlx5_1"
    assert got["master_server_address"] == "mc.team-a.svc:50051"


@pytest.mark.parametrize(
    "var",
    [
        {"name": EXTRA, "value": "protocol=rdma"},
        {"name": EXTRA, "value": '["rdma"]'},
        {"name": EXTRA, "valueFrom": {"configMapKeyRef": {"name": "mc", "key": "extra"}}},
    ],
    ids=["not-json", "json-list", "value-from"],
)
def test_templates_extra_config_that_is_not_a_json_object_is_rejected(var: dict[str, Any]) -> None:
    """Decision: neither dropped (the operator's transfer-engine setup would be lost) nor
    kept (the master address would not reach the connector): the pod fails open."""
    with pytest.raises(InjectionRejectedError, match=EXTRA):
        inject(make_pod(make_container(env=[var])), binding=MOONCAKE)


def test_an_empty_template_extra_config_is_none() -> None:
    """LMCache reads an empty LMCACHE_EXTRA_CONFIG as unset (``json.loads(x) if x``)."""
    own = make_container(env=[{"name": EXTRA, "value": ""}])
    got = extra_config(engine_of(inject(make_pod(own), binding=MOONCAKE)))
    assert got["master_server_address"] == "mc.team-a.svc:50051"


def test_mooncake_repeat_injection_is_idempotent() -> None:
    own = make_container(env=[{"name": EXTRA, "value": '{"protocol":"rdma"}'}])
    once = inject(make_pod(own), binding=MOONCAKE)
    assert inject(once, binding=MOONCAKE) == once


def test_mooncake_wired_pod_passes_pod_validation_basics() -> None:
    assert_valid_pod(inject(make_pod(), binding=MOONCAKE))


def test_mooncake_merges_extra_config_itself() -> None:
    """engineOverrides.env's LMCACHE_EXTRA_CONFIG is already in the merged value: the
    override pass must not write the raw object over it."""
    assert ADAPTER.merged_env(MOONCAKE) == (EXTRA,)
    assert ADAPTER.merged_env(LM) == ()
    assert ADAPTER.merged_env(None) == ()
