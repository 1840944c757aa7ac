"""The parallelism flags the host-memory division reads
(``shared/runtime_adapters/engine_parallelism.py``; docs/api.md, "Host memory per pod"),
proved against the published source of both pinned sets: each flag and every alias is
registered by the release's parser, takes an integer, and aliases nothing else; the
reader takes no other flag of the release for a parallelism spelling; and vLLM's world
size per data-parallel rank is the product the reader multiplies."""

from __future__ import annotations

import ast

import pytest

from shared.runtime_adapters import engine_parallelism as ep
from tests.engine_contracts.releases import SETS, releases

pytestmark = pytest.mark.engine_contracts

# Dimensions a release may lack (vLLM 0.11 has neither): the reader must then not
# depend on them for that release.
NEWER_VLLM_ONLY = {ep.PCP, ep.NNODES}
PARALLEL_MODULE = "vllm.config.parallel"


def vllm_version(set_name: str) -> str:
    return SETS[set_name].vllm


@pytest.mark.parametrize("set_name", sorted(SETS))
@pytest.mark.parametrize("dimension", sorted(ep.VLLM_PARALLEL_FLAGS))
def test_vllm_flag_and_aliases_are_the_releases(set_name: str, dimension: str) -> None:
    """Every spelling the reader takes for ``dimension`` is one option of the release,
    with exactly these aliases, taking an int."""
    flags = releases(set_name).vllm.flags
    spellings = ep.VLLM_PARALLEL_FLAGS[dimension]
    present = [s for s in spellings if s in flags]
    if dimension in NEWER_VLLM_ONLY and vllm_version(set_name) == "0.11.0":
        assert not present, (set_name, present)  # vLLM 0.11 refuses it: nothing to size
        return
    assert present == list(spellings), (set_name, dimension, present)
    flag = flags[spellings[0]]
    assert set(flag.names) == set(spellings), (set_name, flag.names)
    assert flag.takes_value, (set_name, flag)
    assert flag.type == "int", (set_name, flag)


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_newest_vllm_adds_prefill_context_parallel_and_nnodes(set_name: str) -> None:
    flags = releases(set_name).vllm.flags
    if vllm_version(set_name) != "0.11.0":
        assert "-pcp" in flags
        assert "-n" in flags
        assert ep.DP_EXTERNAL_LB in flags
        assert ep.NO_DP_EXTERNAL_LB in flags


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_no_other_vllm_flag_reads_as_a_parallelism_spelling(set_name: str) -> None:
    """The reader's "another spelling" rule (abbreviations, attached values) never fires
    on an option the release registers: a real flag is never unreadable."""
    flags = releases(set_name).vllm.flags
    parallel = {s for spellings in ep.VLLM_PARALLEL_FLAGS.values() for s in spellings}
    for name in flags:
        if name in parallel or name in ep.CONFIG_FLAGS:
            continue
        args = [name] if not flags[name].takes_value else [name, "1"]
        count = ep.vllm_process_count({"command": ["vllm", "serve", "m", *args]})
        assert count.readable, (set_name, name, count.unreadable)


def world_size_factors(set_name: str) -> set[str]:
    """The ParallelConfig fields ``__post_init__`` multiplies into ``self.world_size``."""
    tree = releases(set_name).vllm.tree
    module = tree.parse(PARALLEL_MODULE)
    for node in ast.walk(module):
        if not isinstance(node, ast.Assign):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Attribute) and target.attr == "world_size":
            return {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)}
    raise AssertionError(f"{set_name}: no self.world_size = ... in {PARALLEL_MODULE}")


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_vllm_world_size_per_data_parallel_rank(set_name: str) -> None:
    """ParallelConfig.world_size = PP x TP (x PCP from 0.33): the reader's per-rank
    product (decode context parallel shares the TP ranks and is no factor)."""
    expected = {"pipeline_parallel_size", "tensor_parallel_size"}
    if vllm_version(set_name) != "0.11.0":
        expected.add("prefill_context_parallel_size")
    assert world_size_factors(set_name) == expected
    reader = {ep.TP: 2, ep.PP: 3, ep.PCP: 5}
    product = 1
    for factor in reader.values():
        product *= factor
    assert ep.vllm_processes_per_pod(reader) == product


@pytest.mark.parametrize("set_name", sorted(SETS))
@pytest.mark.parametrize("dimension", sorted(ep.SGLANG_PARALLEL_FLAGS))
def test_sglang_flags_are_the_releases(set_name: str, dimension: str) -> None:
    """The SGLang rank flags (HiCache's --hicache-size is per rank) are the release's."""
    flags = releases(set_name).sglang.flags
    spellings = ep.SGLANG_PARALLEL_FLAGS[dimension]
    for spelling in spellings:
        assert spelling in flags, (set_name, spelling)
        assert flags[spelling].takes_value, (set_name, spelling)
        assert set(flags[spelling].names) == set(spellings), (set_name, flags[spelling].names)
    assert ep.SGLANG_DP_ATTENTION in flags
