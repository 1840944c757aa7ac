"""The engine processes of one pod, read from its command line (docs/api.md, "Host memory
per pod"; docs/decisions.md, "The host-memory budget is per pod"): every flag form and
every launcher the pure reader takes, and every form it must call unreadable."""

from __future__ import annotations

from typing import Any

import pytest

from shared.runtime_adapters.engine_parallelism import (
    image_repository,
    is_vllm_openai_image,
    sglang_rank_count,
    vllm_process_count,
)
from tests.builders import container

SERVE = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
API_SERVER = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]


def serve(*args: str) -> dict[str, Any]:
    return container(command=[*SERVE, *args])


@pytest.mark.parametrize(
    ("args", "processes"),
    [
        ([], 1),
        (["-tp", "2"], 2),
        (["--tensor-parallel-size", "4"], 4),
        (["--tensor-parallel-size=8"], 8),
        (["-tp=2"], 2),
        (["--tensor_parallel_size", "4"], 4),
        (["-tp", "2", "--pipeline-parallel-size", "2"], 4),
        (["-tp", "2", "-pp", "3"], 6),
        (["--pipeline-parallel-size=2"], 2),
        (["-tp", "2", "-pcp", "2"], 4),
        (["--prefill-context-parallel-size=2", "-tp", "4"], 8),
        (["-tp", "2", "-dp", "4"], 8),
        (["-tp", "2", "--data-parallel-size=4"], 8),
        (["-tp", "2", "-dp", "4", "-dpl", "2"], 4),
        (["-tp", "2", "-dp", "4", "--data-parallel-size-local=1"], 2),
        (["-tp", "2", "-dp", "4", "-dpn", "3"], 2),
        (["-tp", "2", "-dp", "4", "--data-parallel-rank=0"], 2),
        (["-tp", "2", "-dp", "4", "--data-parallel-external-lb", "-dpn", "1"], 2),
        (["-tp", "8", "--nnodes", "2", "--node-rank", "1"], 4),
        (["-tp", "4", "-dp", "4", "-n", "2"], 8),
        (["-tp", "2", "-tp", "4"], 4),  # the last occurrence wins, as in argparse
        (["--decode-context-parallel-size", "2", "-tp", "2"], 2),  # DCP shares TP ranks
        (["--enforce-eager", "--max-model-len", "4096", "-tp", "2"], 2),
    ],
)
def test_vllm_flag_forms(args: list[str], processes: int) -> None:
    """Every parallelism flag, alias and ``--flag N`` / ``--flag=N`` form."""
    count = vllm_process_count(serve(*args))
    assert count.readable, count.unreadable
    assert count.count == processes


@pytest.mark.parametrize(
    "c",
    [
        container(command=["vllm", "serve"], args=["m", "-tp", "4"]),
        container(command=["/usr/local/bin/vllm", "serve", "m"], args=["-tp", "4"]),
        container(command=[*API_SERVER, "--tensor-parallel-size", "4"]),
        container(command=["python", "-m", "vllm.entrypoints.openai.api_server"], args=["-tp=4"]),
        container(
            command=["python3.12", "-u", "-m", "vllm.entrypoints.openai.api_server", "-tp", "4"]
        ),
        container(image="vllm/vllm-openai:v0.11.0", args=["--model", "m", "-tp", "4"]),
        container(image="docker.io/vllm/vllm-openai:v0.33.0", args=["m", "-tp", "4"]),
        container(image="vllm/vllm-openai@sha256:abc", args=["-tp", "4"]),
    ],
    ids=[
        "serve-command-args",
        "serve-path",
        "api-server",
        "api-server-args",
        "api-server-python-options",
        "image-entrypoint",
        "image-entrypoint-registry",
        "image-entrypoint-digest",
    ],
)
def test_vllm_launchers(c: dict[str, Any]) -> None:
    """vllm serve, the api_server module, and args run by the vllm/vllm-openai image."""
    count = vllm_process_count(c)
    assert (count.count, count.unreadable) == (4, None)


def test_engine_overrides_args_come_after_the_container_args() -> None:
    """engineOverrides.args are appended to the engine's command line: they count."""
    assert vllm_process_count(serve("-tp", "2"), ["--tensor-parallel-size", "4"]).count == 4
    assert vllm_process_count(serve(), ["-tp=8"]).count == 8


@pytest.mark.parametrize(
    ("c", "why"),
    [
        (serve("-tp", "$(TP)"), "unexpanded"),
        (serve("--tensor-parallel-size=$(TP)"), "unexpanded"),
        (serve("$(PARALLEL_ARGS)"), "unexpanded"),
        (serve("--config", "/etc/vllm/config.yaml"), "--config"),
        (serve("--config=/etc/vllm/config.yaml"), "--config"),
        (serve("--tensor-parallel", "4"), "spelling"),
        (serve("-tp4"), "spelling"),
        (serve("-tp", "four"), "positive integer"),
        (serve("-tp", "0"), "positive integer"),
        (serve("-tp"), "no value"),
        (serve("-tp", "3", "--nnodes", "2"), "divide"),
        (container(command=["torchrun", "serve.py"], args=["-tp", "4"]), "launcher"),
        (container(image="my/engine:1", args=["-tp", "4"]), "launcher"),
        (container(command=["sh", "-c", "vllm serve m -tp 4"]), "launcher"),
    ],
)
def test_vllm_unreadable_counts_size_for_one_process(c: dict[str, Any], why: str) -> None:
    """A count that cannot be read is one process, with the reason."""
    count = vllm_process_count(c)
    assert count.count == 1
    assert count.unreadable is not None
    assert why in count.unreadable
    assert count.describe().startswith("1 (unreadable: ")


def test_model_positional_may_be_a_variable() -> None:
    """vllm serve's first argument is the model: a $(VAR) there does not hide a flag."""
    c = container(command=["vllm", "serve", "$(MODEL)", "-tp", "2"])
    assert vllm_process_count(c).count == 2
    assert vllm_process_count(serve("--model", "$(MODEL)", "-tp", "2")).count == 2


@pytest.mark.parametrize(
    ("image", "repo", "vllm"),
    [
        ("vllm/vllm-openai:v0.11.0", "vllm/vllm-openai", True),
        ("registry:5000/vllm/vllm-openai:latest", "registry:5000/vllm/vllm-openai", True),
        ("vllm/vllm-openai", "vllm/vllm-openai", True),
        ("lmsysorg/sglang:v0.5.13", "lmsysorg/sglang", False),
        ("notvllm/vllm-openai:1", "notvllm/vllm-openai", False),
    ],
)
def test_image_repository(image: str, repo: str, vllm: bool) -> None:
    assert image_repository(image) == repo
    assert is_vllm_openai_image(image) is vllm


SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]


@pytest.mark.parametrize(
    ("args", "ranks"),
    [
        ([], 1),
        (["--tp-size", "4"], 4),
        (["--tensor-parallel-size=8"], 8),
        (["--tp-size", "2", "--pp-size", "2"], 4),
        (["--tp-size", "2", "--dp-size", "2"], 4),
        (["--tp-size", "4", "--dp-size", "2", "--enable-dp-attention"], 4),
        (["--tp-size", "8", "--nnodes", "2"], 4),
    ],
)
def test_sglang_ranks(args: list[str], ranks: int) -> None:
    """SGLang HiCache's --hicache-size is per rank: the ranks of the pod."""
    count = sglang_rank_count(container("sglang", command=[*SGLANG, *args]))
    assert (count.count, count.unreadable) == (ranks, None)
