"""The facts of vLLM's own CPU offloading that the ``VLLMOffloading`` wiring relies on,
read with ``ast`` in the published source of vLLM 0.33.0 and 0.34.0 (the releases that
type wires; docs/decisions.md "vLLM's own CPU offloading: engine facts"), and their
absence from 0.11.0:

- ``--kv-offloading-size`` (a float) and ``--kv-offloading-backend`` (``native`` |
  ``lmcache``, default ``native``) are the release's flags; the size is GiB for one
  engine, summed over its tensor-parallel ranks (``CacheConfig``, vllm/config/cache.py);
- ``VllmConfig._post_init_kv_transfer_config`` (vllm/config/vllm.py), once the size is
  set, overwrites ``kv_connector`` whatever the pod's own ``--kv-transfer-config`` named
  (``OffloadingConnector``, or ``SimpleCPUOffloadConnector`` under
  ``VLLM_USE_SIMPLE_KV_OFFLOAD``), sets ``cpu_bytes_to_use`` = size x 2**30 and
  ``kv_role`` ``kv_both``;
- the OffloadingConnector's default spec, ``CPUOffloadingSpec``, reads
  ``kv_connector_extra_config`` ``cpu_bytes_to_use`` (required) and ``eviction_policy``
  (default ``lru``), whose built-in values are ``lru`` and ``arc``
  (vllm/v1/kv_offload/cpu/spec.py, manager.py, policies/factory.py), and holds at most
  ``cpu_bytes_to_use`` bytes;
- the tier is ``/dev/shm/vllm_offload_<engine_id>.mmap`` (plus numbered segments), and
  each data-parallel rank appends ``_dp<rank>`` to its engine id, so each engine of a
  pod has its own region (vllm/v1/kv_offload/cpu/shared_offload_region.py,
  vllm/v1/engine/core.py).
"""

from __future__ import annotations

import ast
from typing import Final

import pytest

from shared import constants as c
from shared.engine_versions import SAMPLE_TARGETS
from shared.runtime_adapters import host_memory_fit, kv_config, vllm_offloading
from tests.engine_contracts.releases import vllm_release
from tests.engine_contracts.source import SourceTree, calls_named, first_string_arg

pytestmark = pytest.mark.engine_contracts

# The releases VLLMOffloading wires (its minimum, and the newest pin).
WIRED: Final = ("0.33.0", "0.34.0")
# What the wiring writes into --kv-transfer-config (the product's own constants), and
# what vLLM must read there.
OFFLOADING_CONNECTOR: Final = host_memory_fit.OFFLOADING_CONNECTOR
CPU_BYTES_TO_USE: Final = host_memory_fit.CPU_BYTES_KEY
EVICTION_POLICY: Final = vllm_offloading.EVICTION_POLICY_KEY
# vLLM's built-in cache policies (CachePolicyFactory): what the API's LRU / ARC render to.
VLLM_EVICTION_POLICIES: Final = frozenset(vllm_offloading.EVICTION_POLICY_VALUE.values())
DEFAULT_EVICTION_POLICY: Final = "lru"
DEFAULT_SPEC: Final = "CPUOffloadingSpec"
SHM_REGION_PREFIX: Final = f"{host_memory_fit.SHM_PATH}/vllm_offload_"

CACHE_MODULE: Final = "vllm.config.cache"
VLLM_CONFIG_MODULE: Final = "vllm.config.vllm"
SPEC_MODULE: Final = "vllm.v1.kv_offload.cpu.spec"
FACTORY_MODULE: Final = "vllm.v1.kv_offload.factory"
POLICIES_MODULE: Final = "vllm.v1.kv_offload.cpu.policies.factory"
MANAGER_MODULE: Final = "vllm.v1.kv_offload.cpu.manager"
REGION_MODULE: Final = "vllm.v1.kv_offload.cpu.shared_offload_region"
ENGINE_CORE_MODULE: Final = "vllm.v1.engine.core"


def tree(version: str) -> SourceTree:
    return vllm_release(version).tree


def method_text(version: str, module: str, cls: str, name: str) -> str:
    found = tree(version).method(module, cls, name)
    assert found is not None, f"vLLM {version}: no {cls}.{name} in {module}"
    return ast.unparse(found)


def field_docstring(version: str, cls: str, name: str) -> tuple[ast.AnnAssign, str]:
    """The ``CacheConfig`` field ``name`` and the docstring that follows it."""
    located = tree(version).class_def(CACHE_MODULE, cls)
    assert located is not None, version
    body = located[1].body
    for index, node in enumerate(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
        ):
            after = body[index + 1] if index + 1 < len(body) else None
            doc = ""
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = str(after.value.value)
            return node, " ".join(doc.split())
    raise AssertionError(f"vLLM {version}: CacheConfig has no field {name}")


@pytest.mark.parametrize("version", WIRED)
def test_the_offloading_flags_are_the_releases(version: str) -> None:
    flags = vllm_release(version).flags
    size = flags[kv_config.KV_OFFLOADING_SIZE]
    assert size.takes_value, size
    assert size.type == "float", size
    assert flags[kv_config.KV_OFFLOADING_BACKEND].takes_value


@pytest.mark.parametrize("version", WIRED)
def test_the_size_is_gib_for_one_engine_summed_over_its_tensor_parallel_ranks(
    version: str,
) -> None:
    node, doc = field_docstring(version, "CacheConfig", "kv_offloading_size")
    assert isinstance(node.value, ast.Constant)
    assert node.value.value is None
    assert "in GiB" in doc, doc
    assert "summed across all TP ranks" in doc, doc


@pytest.mark.parametrize("version", WIRED)
def test_the_backend_is_native_or_lmcache_and_native_by_default(version: str) -> None:
    node, _ = field_docstring(version, "CacheConfig", "kv_offloading_backend")
    assert isinstance(node.value, ast.Constant)
    assert node.value.value == "native"
    literal = tree(version).top_level(CACHE_MODULE, "KVOffloadingBackend")
    assert literal is not None, version
    values = {n.value for n in ast.walk(literal) if isinstance(n, ast.Constant)}
    assert values == {"native", "lmcache"}, values


@pytest.mark.parametrize("version", WIRED)
def test_the_size_overwrites_the_pods_connector(version: str) -> None:
    """Set, the size replaces ``kv_connector`` unconditionally: a NIXL or Mooncake
    connector the pod named is dropped (the wiring never adds the flag to such a pod)."""
    found = tree(version).method(VLLM_CONFIG_MODULE, "VllmConfig", "_post_init_kv_transfer_config")
    assert found is not None, version
    assigns = [
        node
        for node in ast.walk(found)
        if isinstance(node, ast.Assign)
        and ast.unparse(node.targets[0]) == "self.kv_transfer_config.kv_connector"
    ]
    assert assigns, version
    conditions = [ast.unparse(n.test) for n in ast.walk(found) if isinstance(n, ast.If)]
    # Only the size, the missing config and the backend are tested; never the connector.
    assert not [c for c in conditions if "kv_connector" in c], conditions
    text = ast.unparse(found)
    assert f"config_connector = '{OFFLOADING_CONNECTOR}'" in text
    assert "VLLM_USE_SIMPLE_KV_OFFLOAD" in text  # the other native connector, by env
    assert f"'{CPU_BYTES_TO_USE}': kv_offloading_size * (1 << 30)" in text
    assert "self.kv_transfer_config.kv_role = 'kv_both'" in text


@pytest.mark.parametrize("version", WIRED)
def test_the_connector_is_registered_and_its_default_spec_is_the_cpu_one(version: str) -> None:
    assert OFFLOADING_CONNECTOR in vllm_release(version).connectors
    text = method_text(version, FACTORY_MODULE, "OffloadingSpecFactory", "get_spec_cls")
    assert f"extra_config.get('spec_name', '{DEFAULT_SPEC}')" in text


@pytest.mark.parametrize("version", WIRED)
def test_the_cpu_spec_reads_the_bytes_and_the_policy(version: str) -> None:
    """``cpu_bytes_to_use`` is required and bounds the tier (whole chunks of it);
    ``eviction_policy`` defaults to ``lru`` and reaches the manager as its policy."""
    init = method_text(version, SPEC_MODULE, DEFAULT_SPEC, "__init__")
    assert f"self.extra_config.get('{CPU_BYTES_TO_USE}')" in init
    assert "if not cpu_bytes_to_use:" in init
    assert "int(cpu_bytes_to_use) // aligned_kv_bytes_per_chunk" in init
    assert f"self.extra_config.get('{EVICTION_POLICY}', '{DEFAULT_EVICTION_POLICY}')" in init
    manager = method_text(version, SPEC_MODULE, DEFAULT_SPEC, "get_manager")
    assert "cache_policy=self.eviction_policy" in manager


@pytest.mark.parametrize("version", WIRED)
def test_the_built_in_policies_are_lru_and_arc(version: str) -> None:
    """Names are matched as written (a dict lookup): ``LRU`` would be refused, so the
    wiring renders the API's LRU / ARC in lower case."""
    module = tree(version).parse(POLICIES_MODULE)
    registered = {first_string_arg(c) for c in calls_named(module, "register_cache_policy")}
    assert registered - {None} == VLLM_EVICTION_POLICIES, registered
    # The API's default (LRU) is vLLM's own default.
    assert vllm_offloading.EVICTION_POLICY_VALUE[c.EVICTION_POLICY_LRU] == DEFAULT_EVICTION_POLICY
    lookup = method_text(version, POLICIES_MODULE, "CachePolicyFactory", "get_cache_policy_cls")
    assert "if name in cls._registry" in lookup
    assert ".lower()" not in lookup
    manager = method_text(version, MANAGER_MODULE, "CPUOffloadingManager", "__init__")
    assert "CachePolicyFactory.get_cache_policy_cls" in manager


@pytest.mark.parametrize("version", WIRED)
def test_the_tier_is_a_file_in_dev_shm_per_engine(version: str) -> None:
    init = method_text(version, REGION_MODULE, "SharedOffloadRegion", "__init__")
    assert f"self.mmap_path = f'{SHM_REGION_PREFIX}{{engine_id}}.mmap'" in init
    assert "check_shm_free_space(" in init  # vLLM refuses to start when /dev/shm is short
    spec = method_text(version, SPEC_MODULE, DEFAULT_SPEC, "create_worker")
    assert "engine_id=self.config.engine_id" in spec
    # Each data-parallel rank's engine id is its own: one region per engine.
    core = ast.unparse(tree(version).parse(ENGINE_CORE_MODULE))
    assert "f'{vllm_config.kv_transfer_config.engine_id}_dp{dp_rank}'" in core


def test_vllm_0_11_0_has_no_offloading_flags_and_no_overwrite() -> None:
    assert SAMPLE_TARGETS.vllm == "0.11.0"
    surface = vllm_release("0.11.0")
    assert kv_config.KV_OFFLOADING_SIZE not in surface.flags
    assert kv_config.KV_OFFLOADING_BACKEND not in surface.flags
    assert "_post_init_kv_transfer_config" not in surface.tree.text
    assert not surface.tree.has_module(REGION_MODULE)


def test_the_checks_can_fail() -> None:
    """The control: the same readers on 0.11.0 find none of what 0.34.0 has, and a
    misspelt policy or flag is not found."""
    newest = vllm_release("0.34.0")
    assert "--kv-offloading-sizes" not in newest.flags
    module = tree("0.34.0").parse(POLICIES_MODULE)
    registered = {first_string_arg(c) for c in calls_named(module, "register_cache_policy")}
    assert "LRU" not in registered
    assert "fifo" not in registered
    with pytest.raises(AssertionError, match="no field kv_offloading_size"):
        field_docstring("0.11.0", "CacheConfig", "kv_offloading_size")
