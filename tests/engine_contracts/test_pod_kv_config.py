"""What composing with a pod's own KV configuration relies on, read in vLLM's published
source at every release of the connector table (``REGISTERED_KV_CONNECTORS``, which
covers the vLLM release of every pinned set):

- the connector registry (``kv_connector/factory.py``) is the table's row;
- ``MultiConnector`` is registered and reads its sub-connectors from
  ``kv_connector_extra_config["connectors"]``, building each as
  ``KVTransferConfig(**entry, engine_id=...)`` (so an entry may not carry ``engine_id``);
- the top-level ``kv_role`` decides the producer/consumer role where ``_connector_roles``
  is absent (0.11.0, 0.33.0), the children's roles where it is present (0.34.0);
- ``VllmConfig._post_init_kv_transfer_config`` overwrites ``kv_connector`` when
  ``kv_offloading_size`` is set (from 0.11.1), and 0.11.0 has no ``--kv-offloading-size``.

SGLang prefill/decode disaggregation, at both pinned SGLang releases (0.5.13, 0.5.23):
- ``--disaggregation-mode`` takes ``null`` / ``prefill`` / ``decode`` and
  ``--disaggregation-transfer-backend`` a value; ``--disaggregation-decode-enable-radix-cache``
  is a store_true flag (no ``--no-`` form);
- ``handle_pd_disaggregation`` sets ``disable_radix_cache`` on a decode server unless
  that flag is given, and HiCache refuses a disabled radix cache; the tree factory then
  builds no LMCache tree (ChunkCache at 0.5.13, a disabled unified cache at 0.5.23).
"""

from __future__ import annotations

import ast
import json

import pytest

from shared.api.models import CacheBackend
from shared.engine_versions import NEWEST, SAMPLE_TARGETS
from shared.runtime_adapters import kv_config
from shared.runtime_adapters.base import InjectContext, InjectionRejectedError
from shared.runtime_adapters.kv_config import read_kv_tokens
from shared.runtime_adapters.podspec import cli_tokens
from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter
from shared.runtime_adapters.vllm_release import REGISTERED_KV_CONNECTORS, release_text
from tests.engine_contracts.checks import Option, check_vllm_json_flag
from tests.engine_contracts.releases import SETS, releases, vllm_release
from tests.engine_contracts.source import calls_named, first_string_arg

pytestmark = pytest.mark.engine_contracts

RELEASES = [release_text(r) for r in sorted(REGISTERED_KV_CONNECTORS)]
MULTI_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.multi_connector"
KV_TRANSFER_MODULE = "vllm.config.kv_transfer"
VLLM_CONFIG_MODULE = "vllm.config.vllm"


def row(version: str) -> frozenset[str]:
    return next(v for k, v in REGISTERED_KV_CONNECTORS.items() if release_text(k) == version)


def test_every_pinned_vllm_release_has_a_registry_row() -> None:
    assert {SAMPLE_TARGETS.vllm, NEWEST.vllm} <= set(RELEASES)


@pytest.mark.parametrize("version", RELEASES)
def test_registry_row_is_the_releases_factory(version: str) -> None:
    assert vllm_release(version).connectors == row(version)


@pytest.mark.parametrize("version", RELEASES)
def test_multi_connector_is_registered(version: str) -> None:
    assert kv_config.MULTI_CONNECTOR in vllm_release(version).connectors


@pytest.mark.parametrize("version", RELEASES)
def test_multi_connector_reads_its_list_from_the_connectors_key(version: str) -> None:
    tree = vllm_release(version).tree.parse(MULTI_MODULE)
    keys = {first_string_arg(call) for call in calls_named(tree, "get")}
    assert kv_config.MULTI_CONNECTORS_KEY in keys


@pytest.mark.parametrize("version", RELEASES)
def test_multi_connector_passes_engine_id_beside_each_entry(version: str) -> None:
    """``KVTransferConfig(**ktc, engine_id=...)``: an entry's own engine_id would be a
    duplicate keyword, so composing lifts it to the top level."""
    tree = vllm_release(version).tree.parse(MULTI_MODULE)
    found = [
        call
        for call in calls_named(tree, "KVTransferConfig")
        if any(k.arg is None for k in call.keywords)
        and any(k.arg == "engine_id" for k in call.keywords)
    ]
    assert found, version
    assert kv_config.ENTRY_DROPPED_KEYS == ("engine_id",)
    assert "engine_id" in kv_config.LIFTED_KEYS


@pytest.mark.parametrize("version", RELEASES)
def test_top_level_role_decides_unless_children_roles_are_read(version: str) -> None:
    tree = vllm_release(version).tree
    reads_children = tree.method(KV_TRANSFER_MODULE, "KVTransferConfig", "_connector_roles")
    producer = tree.method(KV_TRANSFER_MODULE, "KVTransferConfig", "is_kv_producer")
    assert producer is not None
    text = ast.unparse(producer)
    if reads_children is None:
        assert "self.kv_role" in text, version  # the MultiConnector's own role decides
    else:
        assert "_connector_roles" in text, version
    # kv_role must be set beside a connector at every release: composing sets it.
    post_init = tree.method(KV_TRANSFER_MODULE, "KVTransferConfig", "__post_init__")
    assert post_init is not None
    assert "self.kv_role is None" in ast.unparse(post_init)
    assert "kv_role" in kv_config.LIFTED_KEYS


@pytest.mark.parametrize("version", RELEASES)
def test_engine_offloading_overwrites_the_connector(version: str) -> None:
    surface = vllm_release(version)
    if version == "0.11.0":
        assert "_post_init_kv_transfer_config" not in surface.tree.text
        assert kv_config.KV_OFFLOADING_SIZE not in surface.flags
        return
    method = surface.tree.method(VLLM_CONFIG_MODULE, "VllmConfig", "_post_init_kv_transfer_config")
    assert method is not None
    text = ast.unparse(method)
    assert "kv_offloading_size" in text
    assert "self.kv_transfer_config.kv_connector = " in text
    assert kv_config.KV_OFFLOADING_SIZE in surface.flags
    assert kv_config.KV_OFFLOADING_BACKEND in surface.flags


PD_HOOK = "sglang.srt.arg_groups.pd_disaggregation_hook"
REGISTRY = "sglang.srt.mem_cache.registry"


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_the_disaggregation_flags_are_the_releases(set_name: str) -> None:
    flags = releases(set_name).sglang.flags
    mode = flags[kv_config.SGLANG_DISAGGREGATION_MODE]
    assert set(mode.choices or ()) == {"null", "prefill", kv_config.SGLANG_DECODE}
    assert flags[kv_config.SGLANG_DISAGGREGATION_BACKEND].takes_value
    radix = flags[kv_config.SGLANG_DECODE_RADIX_CACHE]
    assert not radix.takes_value
    assert "--no-" + kv_config.SGLANG_DECODE_RADIX_CACHE[2:] not in flags


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_a_decode_server_runs_without_a_radix_cache_unless_asked(set_name: str) -> None:
    tree = releases(set_name).sglang.tree
    hook = ast.unparse(tree.parse(PD_HOOK))
    assert "disaggregation_decode_enable_radix_cache" in hook
    assert "disable_radix_cache=True" in hook or "disable_radix_cache = True" in hook
    # HiCache refuses a disabled radix cache at startup.
    assert (
        tree.mentions_string(
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
            "exclusive and cannot be used at the same time. Please use only one of them."
        )
        or "enable-hierarchical-cache and disable-radix-cache are mutually exclusive" in tree.text
    )
    # The tree factory looks at disable_radix_cache before the LMCache tree.
    registry = tree.parse(REGISTRY)
    text = ast.unparse(registry)
    assert text.index("disable_radix_cache") < text.index("enable_lmcache")


# ------------------------------------------------------------------ composed configs

NIXL: dict[str, object] = {
    "kv_connector": "NixlConnector",
    "kv_role": "kv_both",
    "engine_id": "prefill-0",
}
POD_CONFIGS: dict[str, dict[str, object]] = {
    "nixl": NIXL,
    "mooncake-producer": {
        "kv_connector": "MooncakeConnector",
        "kv_role": "kv_producer",
        "kv_load_failure_policy": "recompute",
    },
    "p2p-nccl": {"kv_connector": "P2pNcclConnector", "kv_role": "kv_producer"},
    "multi": {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "connectors": [
                {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                {
                    "kv_connector": "OffloadingConnector",
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {"cpu_bytes_to_use": 1 << 30},
                },
            ]
        },
    },
}


def composed_arg(version: str, pod_config: dict[str, object]) -> str | None:
    """The --kv-transfer-config the webhook leaves on a host-only vLLM pod of this
    release whose own config is ``pod_config``; None when it fails open."""
    container = {
        "name": "vllm",
        "image": f"vllm/vllm-openai:v{version}",
        "command": ["vllm", "serve", "m", "--kv-transfer-config", json.dumps(pod_config)],
    }
    try:
        out = VLLMLMCacheAdapter().inject(
            {"metadata": {}, "spec": {"containers": [container]}},
            CacheBackend.model_validate(
                {"metadata": {"name": "cb", "namespace": "ns"}, "spec": {"runtime": "VLLM"}}
            ),
            None,
            InjectContext(),
        )
    except InjectionRejectedError:
        return None
    found = read_kv_tokens(cli_tokens(out["spec"]["containers"][0]))
    assert found.transfer_occurrences == 1
    return json.dumps(found.transfer_config) if found.transfer_config is not None else None


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("shape", sorted(POD_CONFIGS))
def test_composed_config_is_what_the_release_accepts(version: str, shape: str) -> None:
    """Every key of the composed MultiConnector and of each entry is a KVTransferConfig
    field with an allowed value, every connector is registered, no entry carries
    engine_id; a connector the release does not register fails open instead."""
    surface = vllm_release(version)
    pod_config = POD_CONFIGS[shape]
    names = [pod_config["kv_connector"]]
    extra = pod_config.get("kv_connector_extra_config")
    if isinstance(extra, dict):
        names += [e["kv_connector"] for e in extra["connectors"]]
    # kv_load_failure_policy is a field from 0.33 only: a pod of 0.11 would not carry it.
    fields = surface.json_flags[kv_config.KV_TRANSFER_CONFIG].fields
    if any(key not in fields for key in pod_config):
        return  # nothing to prove: vLLM itself refuses that pod
    arg = composed_arg(version, pod_config)
    if not all(n in surface.connectors for n in names):
        assert arg is None, (version, shape)
        return
    assert arg is not None, (version, shape)
    composed = json.loads(arg)
    problems = check_vllm_json_flag(surface, Option(kv_config.KV_TRANSFER_CONFIG, arg))
    for entry in composed["kv_connector_extra_config"][kv_config.MULTI_CONNECTORS_KEY]:
        assert "engine_id" not in entry
        problems += check_vllm_json_flag(
            surface, Option(kv_config.KV_TRANSFER_CONFIG, json.dumps(entry))
        )
    assert problems == [], (version, shape)
