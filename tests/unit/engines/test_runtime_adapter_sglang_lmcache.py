"""SGLang + LMCache (MP mode) adapter: spec "SGLang LMCache MP mode", per rule."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.bindings import Binding
from shared.runtime_adapters import sglang_lmcache as mp
from shared.runtime_adapters.base import InjectionRejectedError
from shared.runtime_adapters.registry import select_adapter
from shared.runtime_adapters.sglang_lmcache import SGLangLMCacheAdapter
from tests.builders import (
    SGLANG_IMAGE,
    Injector,
    assert_valid_pod,
    containers_of,
    env_of,
    init_containers_of,
    parsed_backend,
)
from tests.builders import container as make_container
from tests.builders import pod as make_pod
from tests.builders import sglang_container as sglang

ADAPTER = SGLangLMCacheAdapter()
REDIS = Binding("resp", "cache-redis.team-a.svc:6379")


# The builders' backend, on the SGLang runtime.
backend = functools.partial(parsed_backend, runtime="SGLang")


inject = Injector(ADAPTER, backend)


def worker_of(pod: dict[str, Any]) -> dict[str, Any]:
    return init_containers_of(pod)["lmcache-mp-worker"]


def volumes_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"].get("volumes") or []}


def mounts_of(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}


def test_registry_and_declarations() -> None:
    assert isinstance(select_adapter("SGLang", "LMCache"), SGLangLMCacheAdapter)
    assert ADAPTER.reserved_args == ("--enable-lmcache", "--lmcache-config-file")
    assert ADAPTER.reserved_env == ("LMCACHE_USE_EXPERIMENTAL", "INFERENCECACHE_FAIL_OPEN")
    assert ADAPTER.supports_binding(None)
    assert ADAPTER.supports_binding(REDIS)
    assert not ADAPTER.supports_binding(Binding("lm", "x:1"))
    assert not ADAPTER.supports_binding(Binding("mooncakestore", "x:1"))


# ----------------------------------------------------------------- engine wire


def test_engine_gets_enable_lmcache_config_file_and_env() -> None:
    engine = containers_of(inject(make_pod(sglang(args=["--model-path", "Qwen/Qwen3-8B"]))))[
        "sglang"
    ]
    assert engine["args"] == [
        "--model-path",
        "Qwen/Qwen3-8B",
        "--enable-lmcache",
        "--lmcache-config-file",
        "/etc/lmcache/lmcache-mp.yaml",
    ]
    env = env_of(engine)
    assert env == {"LMCACHE_USE_EXPERIMENTAL": "True", "INFERENCECACHE_FAIL_OPEN": "true"}


def test_engine_flags_already_in_the_command_are_converged_not_duplicated() -> None:
    """Spec "Idempotency": upsertFlag / upsertArgPair converge on the desired value rather
    than appending a duplicate, and adapters preserve existing user args: an engine whose
    CLI lives in ``command`` and already carries the LMCache flags keeps them there."""
    command = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--enable-lmcache",
        "--lmcache-config-file",
        "/old/path.yaml",
    ]
    engine_in = sglang(command=command, args=["--model-path", "Qwen/Qwen3-8B"])
    engine = containers_of(inject(make_pod(engine_in)))["sglang"]
    assert engine["command"] == [*command[:-1], "/etc/lmcache/lmcache-mp.yaml"]
    assert engine["args"] == ["--model-path", "Qwen/Qwen3-8B"]


def test_no_vllm_or_lm_url_env_for_sglang() -> None:
    env = env_of(containers_of(inject(make_pod(sglang()), binding=REDIS))["sglang"])
    for name in ("VLLM_USE_V1", "PYTHONHASHSEED", "LMCACHE_REMOTE_URL", "LMCACHE_CHUNK_SIZE"):
        assert name not in env


def test_fail_open_mirror_false() -> None:
    cb = backend(integration={"failOpen": False})
    assert (
        env_of(containers_of(inject(make_pod(sglang()), cb))["sglang"])["INFERENCECACHE_FAIL_OPEN"]
        == "false"
    )


@pytest.mark.parametrize("role", ["ReadOnly", "WriteOnly"])
def test_only_read_write_role_is_supported(role: str) -> None:
    with pytest.raises(InjectionRejectedError, match="ReadWrite"):
        inject(make_pod(sglang()), backend(integration={"role": role}))


def test_engine_selection_one_container_any_name() -> None:
    out = inject(make_pod(sglang("server")))
    assert "--enable-lmcache" in containers_of(out)["server"]["args"]


def test_engine_selection_multi_container_requires_sglang_name() -> None:
    with pytest.raises(InjectionRejectedError, match="sglang"):
        inject(make_pod(sglang("server"), make_container("proxy", image="envoy")))
    out = inject(make_pod(make_container("proxy", image="envoy"), sglang()))
    assert "args" not in containers_of(out)["proxy"]


def test_shell_script_engine_is_rejected() -> None:
    with pytest.raises(InjectionRejectedError, match="shell"):
        inject(make_pod(sglang(command=["sh", "-c", "python3 -m sglang.launch_server"])))


# --------------------------------------------------------------- MP worker


def test_worker_is_a_native_sidecar_from_the_engine_image() -> None:
    worker = worker_of(inject(make_pod(sglang(imagePullPolicy="IfNotPresent"))))
    assert worker["restartPolicy"] == "Always"
    assert worker["image"] == SGLANG_IMAGE
    assert worker["imagePullPolicy"] == "IfNotPresent"
    assert worker["command"] == ["python3", "-c", mp.WORKER_BOOTSTRAP]


def test_worker_image_override() -> None:
    worker = worker_of(
        inject(make_pod(sglang()), backend(lmCache={"workerImage": "lmcache/vllm:v0.4"}))
    )
    assert worker["image"] == "lmcache/vllm:v0.4"
    assert "imagePullPolicy" not in worker


def test_worker_args_host_only_have_no_l2_adapter() -> None:
    worker = worker_of(inject(make_pod(sglang())))
    assert worker["args"] == [
        "--host", "127.0.0.1",
        "--port", "5555",
        "--chunk-size", "256",
        "--l1-size-gb", "4",
        "--eviction-policy", "LRU",
    ]  # fmt: skip


def test_worker_args_follow_spec_lmcache() -> None:
    cb = backend(
        lmCache={"chunkSizeTokens": 512, "workerPort": 6000, "hostMemory": {"capacity": "32Gi"}}
    )
    args = worker_of(inject(make_pod(sglang()), cb))["args"]
    assert args[args.index("--port") + 1] == "6000"
    assert args[args.index("--chunk-size") + 1] == "512"
    assert args[args.index("--l1-size-gb") + 1] == "32"


@pytest.mark.parametrize(
    ("capacity", "gib"), [("1536Mi", "1"), ("512Mi", "1"), ("10G", "9"), (8 * 1024**3, "8")]
)
def test_worker_l1_is_whole_gib_rounded_down_at_least_one(capacity: Any, gib: str) -> None:
    args = worker_of(
        inject(make_pod(sglang()), backend(lmCache={"hostMemory": {"capacity": capacity}}))
    )["args"]
    assert args[args.index("--l1-size-gb") + 1] == gib


def test_worker_l2_adapter_only_with_resp_binding() -> None:
    args = worker_of(inject(make_pod(sglang()), binding=REDIS))["args"]
    spec = json.loads(args[args.index("--l2-adapter") + 1])
    assert spec == {"type": "resp", "host": "cache-redis.team-a.svc", "port": 6379}


def test_worker_l2_adapter_ipv6_host_is_unbracketed() -> None:
    args = worker_of(inject(make_pod(sglang()), binding=Binding("resp", "[fd00::1]:6379")))["args"]
    assert json.loads(args[-1]) == {"type": "resp", "host": "fd00::1", "port": 6379}


def test_worker_env_marker_gpu_visibility_and_config() -> None:
    cb = backend(lmCache={"chunkSizeTokens": 128, "workerPort": 7000})
    env = env_of(worker_of(inject(make_pod(sglang()), cb)))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env[mp.MARKER_ENV] == mp.MARKER_VALUE
    assert env[mp.CONFIG_FILE_ENV] == "/etc/lmcache/lmcache-mp.yaml"
    assert yaml.safe_load(env[mp.CONFIG_CONTENT_ENV]) == {
        "chunk_size": 128,
        "mp_host": "127.0.0.1",
        "mp_port": 7000,
    }


def test_worker_startup_probe_checks_loopback_zmq_port() -> None:
    probe = worker_of(inject(make_pod(sglang()), backend(lmCache={"workerPort": 6001})))[
        "startupProbe"
    ]
    command = probe["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    assert command[-1] == "6001"
    assert "127.0.0.1" in command[2]
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 300


@pytest.mark.services
def test_worker_bootstrap_writes_config_then_execs_the_mp_server(tmp_path: Path) -> None:
    """Run the bootstrap with a stand-in lmcache.v1.multiprocess.server module."""
    pkg = tmp_path / "lmcache" / "v1" / "multiprocess"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "lmcache", tmp_path / "lmcache" / "v1", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "server.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    config = tmp_path / "etc" / "lmcache" / "lmcache-mp.yaml"
    worker = worker_of(inject(make_pod(sglang()), binding=REDIS))
    env = {e["name"]: e["value"] for e in worker["env"]}
    env[mp.CONFIG_FILE_ENV] = str(config)
    proc = subprocess.run(
        [sys.executable, *worker["command"][1:], *worker["args"]],
        env={**env, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(proc.stdout) == worker["args"]
    assert config.read_text() == env[mp.CONFIG_CONTENT_ENV]


# ---------------------------------------------------------- volumes, /dev/shm


def test_config_volume_mounted_on_engine_and_worker() -> None:
    out = inject(make_pod(sglang()))
    assert volumes_of(out)["lmcache-config"] == {"name": "lmcache-config", "emptyDir": {}}
    engine = containers_of(out)["sglang"]
    assert mounts_of(engine)["/etc/lmcache"] == "lmcache-config"
    assert mounts_of(worker_of(out))["/etc/lmcache"] == "lmcache-config"


def test_dev_shm_added_as_sized_memory_emptydir_when_engine_has_none() -> None:
    out = inject(make_pod(sglang()), backend(lmCache={"hostMemory": {"capacity": "32Gi"}}))
    assert volumes_of(out)["lmcache-dshm"] == {
        "name": "lmcache-dshm",
        "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"},
    }
    assert mounts_of(containers_of(out)["sglang"])["/dev/shm"] == "lmcache-dshm"
    assert mounts_of(worker_of(out))["/dev/shm"] == "lmcache-dshm"


def test_dev_shm_default_size_is_4gi_and_sub_gib_budget_fits_the_l1() -> None:
    assert volumes_of(inject(make_pod(sglang())))["lmcache-dshm"]["emptyDir"]["sizeLimit"] == "4Gi"
    small = inject(make_pod(sglang()), backend(lmCache={"hostMemory": {"capacity": "512Mi"}}))
    assert volumes_of(small)["lmcache-dshm"]["emptyDir"]["sizeLimit"] == "1Gi"


def test_dev_shm_reuses_the_engines_own_volume() -> None:
    engine = sglang(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm/"}])
    pod = make_pod(engine, volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory"}}])
    out = inject(pod)
    assert "lmcache-dshm" not in volumes_of(out)
    assert mounts_of(worker_of(out))["/dev/shm"] == "dshm"
    assert [m for m in containers_of(out)["sglang"]["volumeMounts"] if m["name"] == "dshm"] == [
        {"name": "dshm", "mountPath": "/dev/shm/"}
    ]
    assert_valid_pod(out)


@pytest.mark.parametrize("source", ["configMap", "secret", "downwardAPI", "projected"])
def test_dev_shm_from_read_only_source_is_rejected(source: str) -> None:
    engine = sglang(volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}])
    pod = make_pod(engine, volumes=[{"name": "shm", source: {}}])
    with pytest.raises(InjectionRejectedError, match=source):
        inject(pod)


def test_dev_shm_mounted_read_only_is_rejected() -> None:
    engine = sglang(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm", "readOnly": True}])
    pod = make_pod(engine, volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory"}}])
    with pytest.raises(InjectionRejectedError, match="read-only"):
        inject(pod)


def test_dev_shm_from_undeclared_volume_is_rejected() -> None:
    engine = sglang(volumeMounts=[{"name": "ghost", "mountPath": "/dev/shm"}])
    with pytest.raises(InjectionRejectedError, match="undeclared"):
        inject(make_pod(engine))


# ------------------------------------------------------------- reserved names


@pytest.mark.parametrize(
    "pod",
    [
        make_pod(sglang(), initContainers=[make_container("lmcache-mp-worker", image="mine")]),
        make_pod(sglang(), make_container("lmcache-mp-worker", image="mine")),
        make_pod(sglang(), volumes=[{"name": "lmcache-config", "configMap": {"name": "mine"}}]),
        make_pod(sglang(), volumes=[{"name": "lmcache-dshm", "emptyDir": {}}]),
        make_pod(
            sglang(volumeMounts=[{"name": "cfg", "mountPath": "/etc/lmcache"}]),
            volumes=[{"name": "cfg", "configMap": {"name": "mine"}}],
        ),
        make_pod(
            sglang(),
            make_container("helper", volumeMounts=[{"name": "cfg", "mountPath": "/etc/lmcache/"}]),
            volumes=[{"name": "cfg", "emptyDir": {}}],
        ),
        make_pod(
            sglang(),
            make_container(
                "helper", volumeMounts=[{"name": "lmcache-config", "mountPath": "/cfg"}]
            ),
        ),
    ],
    ids=[
        "worker-init",
        "worker-regular",
        "config-volume",
        "dshm-volume",
        "config-mount-path",
        "config-mount-path-on-a-sidecar",
        "reserved-volume-name-mounted-by-a-sidecar",
    ],
)
def test_reserved_name_squatting_is_rejected(pod: dict[str, Any]) -> None:
    with pytest.raises(InjectionRejectedError):
        inject(pod)


def test_squatting_worker_without_marker_is_rejected_even_with_reserved_volumes() -> None:
    wired = inject(make_pod(sglang()))
    forged = copy.deepcopy(wired)
    worker = worker_of(forged)
    worker["env"] = [e for e in worker["env"] if e["name"] != mp.MARKER_ENV]
    with pytest.raises(InjectionRejectedError):
        inject(forged)


def test_re_injection_recognises_its_own_worker_and_converges() -> None:
    cb = backend(lmCache={"hostMemory": {"capacity": "8Gi"}})
    once = inject(make_pod(sglang()), cb, REDIS)
    assert inject(once, cb, REDIS) == once


def test_re_injection_converges_an_old_render_onto_the_current_one() -> None:
    old = inject(make_pod(sglang()), backend(lmCache={"chunkSizeTokens": 64}))
    new_cb = backend(lmCache={"chunkSizeTokens": 512, "hostMemory": {"capacity": "16Gi"}})
    out = inject(old, new_cb, REDIS)
    assert out == inject(make_pod(sglang()), new_cb, REDIS)


def test_re_injection_keeps_api_server_defaulted_fields() -> None:
    once = inject(make_pod(sglang()))
    persisted = copy.deepcopy(once)
    worker_of(persisted)["terminationMessagePolicy"] = "File"
    assert worker_of(inject(persisted))["terminationMessagePolicy"] == "File"


def test_worker_appended_after_user_init_containers() -> None:
    pod = make_pod(sglang(), initContainers=[make_container("download", image="busybox")])
    out = inject(pod)
    assert [ic["name"] for ic in out["spec"]["initContainers"]] == ["download", "lmcache-mp-worker"]


def test_inject_never_mutates_its_input() -> None:
    pod = make_pod(sglang(args=["--model-path", "m"]))
    before = copy.deepcopy(pod)
    inject(pod, binding=REDIS)
    assert pod == before


@pytest.mark.parametrize("binding", [None, REDIS], ids=["host-only", "redis"])
def test_wired_pod_passes_pod_validation_basics(binding: Binding | None) -> None:
    assert_valid_pod(
        inject(make_pod(sglang(), make_container("proxy", image="envoy")), binding=binding)
    )
