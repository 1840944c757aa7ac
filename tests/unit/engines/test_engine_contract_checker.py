"""The engine-contract checker itself, on a tiny synthetic source tree: it reads flags,
choices, config classes, registries and LMCache's config table with ``ast``, and reports
a missing flag, a value outside the choices, an unknown JSON key, an unregistered
connector, a value LMCache would misread, an unreachable Mooncake master and an unknown
sidecar flag. Pure: no engine, no cache."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from shared.engine_versions import NEWEST, REJECTED, SAMPLE_TARGETS
from shared.runtime_adapters.vllm_release import REGISTERED_KV_CONNECTORS, release_text
from tests.engine_contracts import fetch
from tests.engine_contracts.cache import (
    OVERRIDE_ENV,
    MissingSourcesError,
    cache_root,
    require_release,
)
from tests.engine_contracts.checks import (
    Option,
    Releases,
    check_flag,
    check_hash_seed,
    check_lmcache_value,
    check_module_command,
    check_mooncake_address,
    check_remote_url,
    check_vllm_env_value,
    check_vllm_json_flag,
    container_env,
    exec_argv,
    expansion_references,
    options,
    unexpanded_references,
)
from tests.engine_contracts.surfaces import read_lmcache, read_sglang, read_vllm

SOURCES = {
    "sglang/srt/server_args.py": """
        IO_BACKENDS = ["direct", "kernel"]

        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                parser.add_argument("--enable-lmcache", action="store_true")
                parser.add_argument("--hicache-io-backend", type=str, choices=IO_BACKENDS)
                parser.add_argument("--hicache-size", type=int)
                add_more(parser)

        def add_more(parser):
            parser.add_argument("--model-path", "--model", type=str)
        """,
    "sglang/srt/arg_groups/fields/memory.py": """
        from sglang.srt.arg_groups.arg_utils import A, Arg
        LAYOUTS = ["layer_first", "page_first"]

        class Memory(msgspec.Struct):
            _NS_PATH = "memory"
            enable_hierarchical_cache: A[bool, Arg(help="x", aliases=["--enable-hicache"])] = False
            hicache_mem_layout: A[str, Arg(help="x", choices=LAYOUTS)] = None
            hicache_ratio: A[Optional[float], "help"] = None
            internal_only: A[int, Arg(help="x", no_cli=True)] = 0

        class Derived:
            not_a_flag: A[int, "help"] = 0
        """,
    "vllm/engine/arg_utils.py": """
        from dataclasses import dataclass
        from typing import Optional
        from vllm.config.kv_transfer import KVTransferConfig

        @dataclass
        class EngineArgs:
            kv_transfer_config: Optional[KVTransferConfig] = None
            max_model_len: Optional[int] = None
            enforce_eager: bool = False

            @staticmethod
            def add_cli_args(parser):
                kw = get_kwargs(EngineArgs)
                parser.add_argument("--kv-transfer-config", **kw["kv_transfer_config"])
                parser.add_argument("--max-model-len", **kw["max_model_len"])
                parser.add_argument("--enforce-eager", **kw["enforce_eager"])
        """,
    "vllm/config/kv_transfer.py": """
        from typing import Literal, Optional
        KVProducer = Literal["kv_producer", "kv_both"]
        KVRole = Literal[KVProducer, "kv_consumer"]

        class KVTransferConfig:
            kv_connector: Optional[str] = None
            kv_role: Optional[KVRole] = None
        """,
    "vllm/config/kv_events.py": """
        class KVEventsConfig:
            publisher: str = "null"
            endpoint: str = "tcp://*:5557"
        """,
    "vllm/distributed/kv_transfer/kv_connector/factory.py": """
        KVConnectorFactory.register_connector("LMCacheConnectorV1", "m", "C")
        """,
    "vllm/distributed/kv_events.py": """
        class EventPublisherFactory:
            _registry: dict = {"null": 1, "zmq": 2}
        """,
    "vllm/envs.py": """
        import os
        environment_variables: dict = {
            "VLLM_USE_V1": lambda: bool(int(os.getenv("VLLM_USE_V1", "1"))),
            "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),
        }
        """,
    "lmcache/v1/config.py": """
        import json
        from lmcache.v1.config_base import _to_bool
        _CONFIG_ALIASES = {"old_chunk": "chunk_size"}
        _EC_ENV_PREFIX = "LMCACHE_EC_"
        _CONFIG_DEFINITIONS = {
            "chunk_size": {"type": int, "default": 256, "env_converter": int},
            "local_cpu": {"type": bool, "default": True, "env_converter": _to_bool},
            "extra_config": {
                "type": Optional[dict],
                "default": None,
                "env_converter": lambda x: json.loads(x) if x else None,
            },
        }
        """,
    "lmcache/v1/storage_backend/connector/lm_adapter.py": """
        class LMServerConnectorAdapter(ConnectorAdapter):
            def __init__(self):
                super().__init__("lm://")
            def create_connector(self, context):
                return parse_remote_url(context.url)
        """,
    "lmcache/v1/storage_backend/connector/mooncakestore_adapter.py": """
        class MooncakestoreConnectorAdapter(ConnectorAdapter):
            def __init__(self):
                super().__init__("mooncakestore://")
            def create_connector(self, context):
                return MooncakestoreConnector(lmcache_config=context.config)
        """,
    "lmcache/v1/storage_backend/connector/mooncakestore_connector.py": """
        _MOONCAKE_PREFIX = "mooncake_"
        _LEGACY_PASSTHROUGH_KEYS = {"master_server_address", "protocol"}

        class MooncakeStoreConfig:
            @staticmethod
            def load_from_lmcache_config(config):
                return config.extra_config
        """,
    "lmcache/v1/multiprocess/server.py": """
        import argparse
        from lmcache.v1.multiprocess.config import add_mp_server_args

        def parse_args():
            parser = argparse.ArgumentParser()
            add_mp_server_args(parser)
            return parser.parse_args()

        if __name__ == "__main__":
            parse_args()
        """,
    "lmcache/v1/multiprocess/config.py": """
        def add_mp_server_args(parser):
            parser.add_argument("--port", type=int)
            parser.add_argument("--eviction-policy", type=str, choices=["LRU", "noop"])
        """,
}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Releases:
    root = tmp_path_factory.mktemp("src")
    for name, text in SOURCES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return Releases(
        name="synthetic",
        vllm=read_vllm(root, "9.9.9"),
        sglang=read_sglang(root, "9.9.9"),
        lmcache=read_lmcache(root, "9.9.9", ["lmcache/c_ops.cpython-311-x86_64-linux-gnu.so"]),
    )


def test_the_reader_follows_calls_and_resolves_module_level_choices(synthetic: Releases) -> None:
    flags = synthetic.sglang.flags
    assert flags["--hicache-io-backend"].choices == ("direct", "kernel")
    assert flags["--model"] is flags["--model-path"]
    assert not flags["--enable-lmcache"].takes_value
    assert synthetic.vllm.json_flags["--kv-transfer-config"].choices["kv_role"] == {
        "kv_producer",
        "kv_both",
        "kv_consumer",
    }
    assert synthetic.lmcache.schemes["lm"].reads_url
    assert not synthetic.lmcache.schemes["mooncakestore"].reads_url


def test_sglang_flags_derived_from_namespace_fields(synthetic: Releases) -> None:
    """SGLang >= 0.5.2x: ``A[T, Arg(...)]`` fields of ``_NS_PATH`` classes become flags."""
    flags = synthetic.sglang.flags
    assert flags["--enable-hicache"] is flags["--enable-hierarchical-cache"]
    assert not flags["--enable-hierarchical-cache"].takes_value
    assert flags["--hicache-mem-layout"].choices == ("layer_first", "page_first")
    assert flags["--hicache-ratio"].type == "float"
    assert "--internal-only" not in flags
    assert "--not-a-flag" not in flags


def test_a_missing_flag_is_reported(synthetic: Releases) -> None:
    assert check_flag(
        "sglang 9.9.9",
        "sglang.launch_server",
        synthetic.sglang.flags,
        Option("--lmcache-config-file", "/etc/lmcache/x.yaml"),
    ) == ["sglang 9.9.9: flag --lmcache-config-file is not a flag of sglang.launch_server"]


def test_a_value_outside_the_choices_or_its_type_is_reported(synthetic: Releases) -> None:
    flags = synthetic.sglang.flags
    (bad_choice,) = check_flag("s", "cli", flags, Option("--hicache-io-backend", "kernel_ascend"))
    assert "'kernel_ascend' is not one of its choices ['direct', 'kernel']" in bad_choice
    (bad_int,) = check_flag("s", "cli", flags, Option("--hicache-size", "4Gi"))
    assert "does not convert to int" in bad_int
    (valued_bool,) = check_flag("s", "cli", flags, Option("--enable-lmcache", "yes"))
    assert "takes no value" in valued_bool
    assert check_flag("s", "cli", flags, Option("--hicache-io-backend", "kernel")) == []


def test_booleans_take_no_value_when_splitting_argv(synthetic: Releases) -> None:
    tokens = ["python3", "-m", "sglang.launch_server", "--enable-lmcache", "--hicache-size", "4"]
    assert options(tokens, synthetic.sglang.flags) == [
        Option("--enable-lmcache", None),
        Option("--hicache-size", "4"),
    ]


def test_json_keys_connectors_and_literal_values_are_checked(synthetic: Releases) -> None:
    def check(value: str) -> list[str]:
        return check_vllm_json_flag(synthetic.vllm, Option("--kv-transfer-config", value))

    assert check('{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}') == []
    (unknown,) = check('{"kv_connector":"LMCacheConnectorV1","kv_rank":0}')
    assert "key 'kv_rank' is not a field of KVTransferConfig" in unknown
    (connector,) = check('{"kv_connector":"NoSuchConnector"}')
    assert "kv_connector 'NoSuchConnector' is not registered" in connector
    (role,) = check('{"kv_role":"kv_everything"}')
    assert "kv_role='kv_everything'" in role


def test_lmcache_env_values_convert_as_lmcache_converts_them(synthetic: Releases) -> None:
    lm = synthetic.lmcache
    assert lm.env_names()["LMCACHE_OLD_CHUNK"] == "chunk_size"
    assert check_lmcache_value(lm, "LMCACHE_CHUNK_SIZE", "chunk_size", "256") == []
    assert check_lmcache_value(lm, "LMCACHE_CHUNK_SIZE", "chunk_size", "256.0")
    (silently_false,) = check_lmcache_value(lm, "LMCACHE_LOCAL_CPU", "local_cpu", "yes")
    assert "_to_bool reads it as False" in silently_false
    (not_object,) = check_lmcache_value(lm, "LMCACHE_EXTRA_CONFIG", "extra_config", "[1]")
    assert "is not a JSON object" in not_object


def test_the_mooncake_master_must_reach_the_connector_through_extra_config(
    synthetic: Releases,
) -> None:
    lm = synthetic.lmcache
    url = {"LMCACHE_REMOTE_URL": "mooncakestore://master:50051"}
    (nowhere,) = check_remote_url(lm, dict(url), "master:50051")
    assert "mooncakestore:// connects nowhere" in nowhere
    good = '{"master_server_address":"master:50051","protocol":"tcp"}'
    assert check_mooncake_address(lm, {**url, "LMCACHE_EXTRA_CONFIG": good}, "master:50051") == []
    wrong = '{"master_server_address":"other:1","local_hostname":"x"}'
    problems = check_mooncake_address(lm, {**url, "LMCACHE_EXTRA_CONFIG": wrong}, "master:50051")
    assert any("not the master's endpoint 'master:50051'" in p for p in problems)
    assert any("key 'local_hostname' is neither forwarded" in p for p in problems)
    assert check_remote_url(lm, {"LMCACHE_REMOTE_URL": "lm://a:1"}, "a:1") == []
    (elsewhere,) = check_remote_url(lm, {"LMCACHE_REMOTE_URL": "lm://a:1"}, "b:2")
    assert "not the binding's endpoint 'b:2'" in elsewhere
    (scheme,) = check_remote_url(lm, {"LMCACHE_REMOTE_URL": "nope://a:1"}, "a:1")
    assert "scheme 'nope' has no connector adapter" in scheme


def test_a_sidecar_module_and_its_flags_are_checked(synthetic: Releases) -> None:
    assert (
        check_module_command(
            synthetic, ["python3", "-m", "lmcache.v1.multiprocess.server", "--port", "5555"]
        )
        == []
    )
    (unknown,) = check_module_command(
        synthetic, ["python3", "-m", "lmcache.v1.multiprocess.server", "--l1-size-gb", "1"]
    )
    assert "flag --l1-size-gb is not a flag of python -m lmcache.v1.multiprocess.server" in unknown
    (missing,) = check_module_command(synthetic, ["python3", "-m", "lmcache.v1.gone"])
    assert "python -m lmcache.v1.gone: the module does not exist" in missing


def test_a_bootstrap_scripts_exec_is_the_sidecar_command() -> None:
    script = (
        "import os, sys\n"
        'os.execv(sys.executable, [sys.executable, "-m", "pkg.server", *sys.argv[1:]])\n'
    )
    container = {"command": ["python3", "-c", script], "args": ["--port", "1"]}
    assert exec_argv(container) == ["python3", "-m", "pkg.server", "--port", "1"]


def test_kubernetes_expands_earlier_variables_and_the_downward_api() -> None:
    container = {
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "CONF", "value": '{"local_hostname":"$(POD_IP)","later":"$(LATER)"}'},
            {"name": "LATER", "value": "x"},
            {"name": "ESCAPED", "value": "$$(POD_IP)"},
        ]
    }
    env = container_env(container)
    assert env["CONF"] == '{"local_hostname":"10.0.0.7","later":"$(LATER)"}'
    assert env["ESCAPED"] == "$(POD_IP)"
    assert unexpanded_references(container) == {"CONF": ["LATER"]}


def test_a_missing_cache_fails_naming_make_engine_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OVERRIDE_ENV, str(tmp_path))
    assert cache_root() == tmp_path
    with pytest.raises(MissingSourcesError, match=r"make engine-sources"):
        require_release("vllm", "0.11.0")


def test_the_fetcher_covers_both_pinned_sets_and_the_rejected_releases() -> None:
    wanted = {(p, s.of(p)) for s in (SAMPLE_TARGETS, NEWEST) for p in ("vllm", "sglang", "lmcache")}
    wanted |= {(p, v) for p, versions in REJECTED.items() for v in versions}
    # The vLLM releases whose KV connector registry the composing wiring reads.
    wanted |= {("vllm", release_text(r)) for r in REGISTERED_KV_CONNECTORS}
    assert set(fetch.releases()) == wanted
    assert len(fetch.releases()) == len(wanted)


def test_a_variable_only_kubernetes_expands_counts_as_read() -> None:
    container = {
        "env": [
            {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "CONF", "value": '{"local_hostname":"$(NODE_IP)","x":"$$(ESCAPED)"}'},
        ],
        "args": ["--host", "$(ARG_VAR)"],
    }
    assert expansion_references(container) == {"NODE_IP", "ARG_VAR"}


def test_vllm_and_interpreter_variables_convert(synthetic: Releases) -> None:
    assert synthetic.vllm.env_types == {"VLLM_USE_V1": "int", "VLLM_HOST_IP": "str"}
    assert check_vllm_env_value(synthetic.vllm, "VLLM_USE_V1", "1") == []
    (not_int,) = check_vllm_env_value(synthetic.vllm, "VLLM_USE_V1", "true")
    assert "VLLM_USE_V1='true' does not convert to int" in not_int
    assert check_hash_seed("0") == []
    assert check_hash_seed("random") == []
    assert check_hash_seed("-1")
