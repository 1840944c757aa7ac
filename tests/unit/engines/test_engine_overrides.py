"""Spec "Engine-injection overrides (spec.integration.engineOverrides)", per rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.api.models import EngineOverrides
from shared.pod_wiring import wire_pod
from shared.runtime_adapters.overrides import (
    adapter_owned_args,
    adapter_owned_env,
    apply_engine_overrides,
    entry_groups,
    entry_tokens,
)
from tests.builders import CTX, assert_idempotent, assert_valid_pod, containers_of, env_of
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

RESERVED_ARGS = ("--kv-transfer-config",)
RESERVED_ENV = ("VLLM_USE_V1", "LMCACHE_REMOTE_URL", "INFERENCECACHE_FAIL_OPEN", "PYTHONHASHSEED")


def ov(**kw: Any) -> EngineOverrides:
    return EngineOverrides.model_validate(kw)


def container(args: list[str] | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "vllm", "image": "vllm"}
    if args is not None:
        out["args"] = args
    if env is not None:
        out["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return out


BEFORE = container(
    ["--model", "m", "--port", "8000"], {"HF_HOME": "/cache", "LMCACHE_CHUNK_SIZE": "128"}
)
# What an adapter could leave: added --chunk, --kv-transfer-config; modified LMCACHE_CHUNK_SIZE.
AFTER = container(
    ["--model", "m", "--port", "8000", "--chunk", "256", "--kv-transfer-config", "{}"],
    {
        "HF_HOME": "/cache",
        "LMCACHE_CHUNK_SIZE": "256",
        "LMCACHE_LOCAL_CPU": "True",
        "VLLM_USE_V1": "1",
    },
)


def apply(
    o: EngineOverrides, before: dict[str, Any] = BEFORE, after: dict[str, Any] = AFTER
) -> dict[str, Any]:
    return apply_engine_overrides(before, after, o, RESERVED_ARGS, RESERVED_ENV)


def env(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env") or []}


# ------------------------------------------------------- the adapter-owned set


def test_adapter_owned_set_is_the_before_after_diff() -> None:
    assert adapter_owned_args(BEFORE, AFTER) == {"--chunk", "--kv-transfer-config"}
    assert adapter_owned_env(BEFORE, AFTER) == {
        "LMCACHE_CHUNK_SIZE",
        "LMCACHE_LOCAL_CPU",
        "VLLM_USE_V1",
    }


def test_no_overrides_is_byte_identical() -> None:
    assert apply_engine_overrides(BEFORE, AFTER, None) == AFTER
    assert apply(ov()) == AFTER


@pytest.mark.parametrize(
    ("entry", "tokens"),
    [
        ("--max-model-len 4096", ["--max-model-len", "4096"]),
        ("--max-model-len=4096", ["--max-model-len=4096"]),
        ("--enforce-eager", ["--enforce-eager"]),
        ('--json {"a": 1}', ["--json", '{"a": 1}']),
        ("  --x  y  ", ["--x", "y"]),
    ],
)
def test_args_entry_tokenisation(entry: str, tokens: list[str]) -> None:
    assert entry_tokens(entry) == tokens


@pytest.mark.parametrize(
    ("entries", "groups"),
    [
        (["--max-model-len", "4096"], [["--max-model-len", "4096"]]),
        (["--a", "--b", "1", "--c=2"], [["--a"], ["--b", "1"], ["--c=2"]]),
        (["positional", "--a"], [["positional"], ["--a"]]),
        (["--a 1", "2"], [["--a", "1", "2"]]),
        (["", "  "], []),
    ],
)
def test_args_entries_group_by_leading_flag(entries: list[str], groups: list[list[str]]) -> None:
    # A value given as its own list entry belongs to the flag before it: never dropped.
    assert entry_groups(entries) == groups


# ----------------------------------------------------------------------- args


def test_args_entry_matching_adapter_owned_flag_replaces_it_in_place() -> None:
    out = apply(ov(args=["--chunk 512"]))
    assert out["args"] == [
        "--model",
        "m",
        "--port",
        "8000",
        "--chunk",
        "512",
        "--kv-transfer-config",
        "{}",
    ]


def test_args_entry_new_flag_is_appended_in_order() -> None:
    out = apply(ov(args=["--max-model-len 4096", "--enforce-eager"]))
    assert out["args"][-3:] == ["--max-model-len", "4096", "--enforce-eager"]


def test_args_entry_colliding_with_untouched_user_flag_is_a_silent_no_op() -> None:
    assert apply(ov(args=["--port 9000", "--model=other"])) == AFTER


def test_args_entry_on_reserved_flag_is_ignored() -> None:
    assert apply(ov(args=['--kv-transfer-config {"kv_connector":"X"}'])) == AFTER


def test_args_entries_of_the_same_new_flag_do_not_duplicate() -> None:
    out = apply(ov(args=["--max-model-len 1024", "--max-model-len 2048"]))
    assert out["args"].count("--max-model-len") == 1
    assert out["args"][-2:] == ["--max-model-len", "2048"]


def test_suppress_args_removes_adapter_owned_flag_only() -> None:
    out = apply(ov(suppressArgs=["--chunk", "--port", "--model"]))
    assert out["args"] == ["--model", "m", "--port", "8000", "--kv-transfer-config", "{}"]


def test_args_value_as_its_own_entry_is_kept_with_its_flag() -> None:
    out = apply(ov(args=["--max-model-len", "4096", "--chunk", "64"]))
    assert out["args"] == [
        "--model",
        "m",
        "--port",
        "8000",
        "--chunk",
        "64",
        "--kv-transfer-config",
        "{}",
        "--max-model-len",
        "4096",
    ]


def test_suppress_args_of_a_template_flag_the_adapter_modified_restores_it() -> None:
    # "Leading flag names the adapter MUST NOT inject": the template's value stays.
    before = container(["--model", "m", "--chunk=128"])
    after = container(["--model", "m", "--chunk=256", "--kv-transfer-config", "{}"])
    out = apply(ov(suppressArgs=["--chunk"]), before, after)
    assert out["args"] == ["--model", "m", "--chunk=128", "--kv-transfer-config", "{}"]


def test_suppress_args_never_removes_reserved_flag() -> None:
    assert apply(ov(suppressArgs=["--kv-transfer-config"])) == AFTER


# ------------------------------------------------------------------------ env


def test_env_override_of_adapter_owned_name_wins() -> None:
    out = apply(ov(env=[{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}]))
    assert env(out)["LMCACHE_CHUNK_SIZE"] == "512"
    assert [e["name"] for e in out["env"]] == [e["name"] for e in AFTER["env"]]  # in place


def test_env_override_new_name_is_appended() -> None:
    out = apply(ov(env=[{"name": "LMCACHE_SAVE_DECODE_CACHE", "value": "True"}]))
    assert out["env"][-1] == {"name": "LMCACHE_SAVE_DECODE_CACHE", "value": "True"}


def test_env_override_value_from_is_supported() -> None:
    ref = {"secretKeyRef": {"name": "s", "key": "k"}}
    out = apply(ov(env=[{"name": "LMCACHE_REMOTE_SERDE_KEY", "valueFrom": ref}]))
    assert out["env"][-1] == {"name": "LMCACHE_REMOTE_SERDE_KEY", "valueFrom": ref}


def test_env_override_of_user_owned_name_is_a_silent_no_op() -> None:
    assert apply(ov(env=[{"name": "HF_HOME", "value": "/elsewhere"}])) == AFTER


def test_env_override_of_reserved_name_is_ignored() -> None:
    assert apply(ov(env=[{"name": "VLLM_USE_V1", "value": "0"}])) == AFTER


def test_suppress_env_removes_adapter_owned_only() -> None:
    out = apply(ov(suppressEnv=["LMCACHE_LOCAL_CPU", "HF_HOME", "PYTHONHASHSEED_NOT_THERE"]))
    assert "LMCACHE_LOCAL_CPU" not in env(out)
    assert env(out)["HF_HOME"] == "/cache"


def test_suppress_env_of_a_template_value_the_adapter_modified_restores_it() -> None:
    # "suppressEnv: Env var Names the adapter MUST NOT inject ... user-owned env is
    # protected": the adapter's 256 goes, the template's own 128 stays where it was.
    out = apply(ov(suppressEnv=["LMCACHE_CHUNK_SIZE"]))
    assert out["env"] == [
        {"name": "HF_HOME", "value": "/cache"},
        {"name": "LMCACHE_CHUNK_SIZE", "value": "128"},
        {"name": "LMCACHE_LOCAL_CPU", "value": "True"},
        {"name": "VLLM_USE_V1", "value": "1"},
    ]


def test_suppress_env_never_removes_reserved_name() -> None:
    assert apply(ov(suppressEnv=["VLLM_USE_V1"])) == AFTER


def test_inputs_are_not_mutated() -> None:
    before, after = copy.deepcopy(BEFORE), copy.deepcopy(AFTER)
    apply(
        ov(
            args=["--chunk 1", "--new"],
            env=[{"name": "X", "value": "1"}],
            suppressEnv=["LMCACHE_LOCAL_CPU"],
        )
    )
    assert (before, after) == (BEFORE, AFTER)


# ------------------------------------------------------- through the webhook


OVERRIDES: dict[str, Any] = {
    "args": ["--max-model-len 8192"],
    "suppressArgs": ["--port"],
    "env": [
        {"name": "LMCACHE_CHUNK_SIZE", "value": "1024"},
        {"name": "LMCACHE_SAVE_DECODE_CACHE", "value": "True"},
        {"name": "HF_HOME", "value": "/hijack"},
    ],
    "suppressEnv": ["LMCACHE_LOCAL_CPU", "LMCACHE_MAX_LOCAL_CPU_SIZE", "HF_HOME"],
}


def wired() -> tuple[dict[str, Any], dict[str, Any], Any]:
    backend = make_backend(integration={"engineOverrides": copy.deepcopy(OVERRIDES)})
    engine = make_container(
        args=["--model", "m", "--port", "8000"], env=[{"name": "HF_HOME", "value": "/c"}]
    )
    pod = make_pod(engine)
    return pod, backend, wire_pod(pod, [backend], CTX)


def test_webhook_applies_overrides_to_the_engine_container() -> None:
    _, _, result = wired()
    engine = containers_of(result.pod)["vllm"]
    assert engine["args"][:4] == ["--model", "m", "--port", "8000"]  # user --port protected
    assert engine["args"][-2:] == ["--max-model-len", "8192"]
    e = env_of(engine)
    assert e["LMCACHE_CHUNK_SIZE"] == "1024"
    assert e["LMCACHE_SAVE_DECODE_CACHE"] == "True"
    assert e["HF_HOME"] == "/c"
    assert "LMCACHE_LOCAL_CPU" not in e
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE" not in e
    assert e["VLLM_USE_V1"] == "1"
    assert_valid_pod(result.pod)


def test_webhook_overrides_touch_only_the_engine_container() -> None:
    _, _, result = wired()
    assert containers_of(result.pod)["kvevent-subscriber"]["args"][0].startswith(
        "--engine-endpoint="
    )


def test_re_admission_with_overrides_is_idempotent() -> None:
    _, backend, result = wired()
    assert_idempotent(result, [backend], CTX)


def test_no_engine_overrides_renders_the_same_patch_as_before() -> None:
    pod = make_pod()
    plain = wire_pod(pod, [make_backend()], CTX)
    empty = wire_pod(pod, [make_backend(integration={"engineOverrides": {}})], CTX)
    assert plain.pod == empty.pod


def test_sglang_overrides_cannot_touch_reserved_mp_wire() -> None:
    backend = make_backend(
        runtime="SGLang",
        integration={
            "engineOverrides": {
                "suppressArgs": ["--enable-lmcache", "--lmcache-config-file"],
                "suppressEnv": ["LMCACHE_USE_EXPERIMENTAL"],
                "args": ["--page-size 64"],
            }
        },
    )
    result = wire_pod(make_pod(make_container("sglang", image="lmsysorg/sglang")), [backend], CTX)
    engine = containers_of(result.pod)["sglang"]
    assert "--enable-lmcache" in engine["args"]
    assert "--lmcache-config-file" in engine["args"]
    assert engine["args"][-2:] == ["--page-size", "64"]
    assert env_of(engine)["LMCACHE_USE_EXPERIMENTAL"] == "True"
    assert_idempotent(result, [backend], CTX)
