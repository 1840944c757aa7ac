"""How many engine processes one pod starts, read from the engine's own command line.

LMCache builds one cache engine, and so one pinned host-memory pool, per vLLM worker
process (the scheduler process builds none); SGLang's HiCache pool is per rank too. A
host-memory budget meant for the pod must therefore be divided by the pod's process
count, and the pinned total of a pod is the per-process size times that count.

vLLM (rules read from the pinned releases' ``engine/arg_utils.py`` and
``config/parallel.py``; the engine-contract tests prove every flag and alias):

- the launcher is ``vllm serve ...``, ``python -m vllm.entrypoints.openai.api_server
  ...``, or, for a container with ``args`` and no ``command``, the entrypoint of the
  ``vllm/vllm-openai`` image (``vllm serve``);
- ``vllm_processes_per_pod``: tensor-parallel x pipeline-parallel (x prefill
  context-parallel, 0.33) x the data-parallel ranks in the pod; a multi-node launch
  (``--nnodes``, 0.33) divides the whole DP x TP x PP x PCP world by the nodes it
  spans. The in-pod data-parallel ranks are 1 for a pod that is one rank of a wider
  data-parallel deployment (``-dpn``, or 0.33's ``--data-parallel-external-lb``), else
  ``-dpl`` when given, else ``-dp``;
- each flag as ``--flag N``, ``--flag=N`` (vLLM's parser also takes ``_`` for ``-`` in
  a long flag), the last occurrence winning, as in argparse.

A count that cannot be read is ``unreadable`` with the reason: an unknown launcher, a
``--config`` file (it may set any of them), an unexpanded ``$(VAR)`` where a flag or its
value is, or another spelling of a parallelism flag (an abbreviation, ``-tp4``). The
caller then sizes for one process and says why.

SGLang (``sglang_ranks_per_pod``): ``--tp-size`` x ``--pp-size`` (x ``--dp-size``
unless ``--enable-dp-attention``, where the data-parallel ranks are the tensor-parallel
ones), divided by ``--nnodes``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from shared.runtime_adapters.podspec import cli_tokens

VLLM_IMAGE: Final = "vllm/vllm-openai"
VLLM_IMAGE_ENTRYPOINT: Final = ("vllm", "serve")
VLLM_API_SERVER_MODULE: Final = "vllm.entrypoints.openai.api_server"
SGLANG_SERVER_MODULES: Final = ("sglang.launch_server",)
CONFIG_FLAGS: Final = ("--config",)

# Parallelism dimension -> (long flag, short aliases) in the pinned vLLM releases.
TP: Final = "tensor-parallel"
PP: Final = "pipeline-parallel"
PCP: Final = "prefill-context-parallel"
DP: Final = "data-parallel"
DPL: Final = "data-parallel-local"
DP_RANK: Final = "data-parallel-rank"
NNODES: Final = "nnodes"
# vLLM 0.33: the boolean external load-balancer mode (one data-parallel rank per
# instance), and its argparse negation.
DP_EXTERNAL_LB: Final = "--data-parallel-external-lb"
NO_DP_EXTERNAL_LB: Final = "--no-data-parallel-external-lb"
VLLM_PARALLEL_FLAGS: Final[dict[str, tuple[str, ...]]] = {
    TP: ("--tensor-parallel-size", "-tp"),
    PP: ("--pipeline-parallel-size", "-pp"),
    PCP: ("--prefill-context-parallel-size", "-pcp"),
    DP: ("--data-parallel-size", "-dp"),
    DPL: ("--data-parallel-size-local", "-dpl"),
    DP_RANK: ("--data-parallel-rank", "-dpn"),
    NNODES: ("--nnodes", "-n"),
}
SGLANG_PARALLEL_FLAGS: Final[dict[str, tuple[str, ...]]] = {
    TP: ("--tp-size", "--tensor-parallel-size"),
    PP: ("--pp-size", "--pipeline-parallel-size"),
    DP: ("--dp-size", "--data-parallel-size"),
    NNODES: ("--nnodes",),
}
SGLANG_DP_ATTENTION: Final = "--enable-dp-attention"

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


@dataclass(frozen=True)
class ProcessCount:
    """The engine processes of one pod that each pin a host-memory pool.

    ``count`` is what to size for: the read count, or 1 with ``unreadable`` saying why
    the command line could not be read."""

    count: int
    unreadable: str | None = None

    @property
    def readable(self) -> bool:
        return self.unreadable is None

    def describe(self) -> str:
        """The pod's decision annotation value: ``4`` or ``1 (unreadable: <why>)``."""
        if self.unreadable is None:
            return str(self.count)
        return f"{self.count} (unreadable: {self.unreadable})"


class UnreadableError(Exception):
    """The command line does not say the process count in a form read here."""


# ------------------------------------------------------------------ launchers


def image_repository(image: str) -> str:
    """``registry/org/name`` of an image reference, without tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return name


def is_vllm_openai_image(image: str) -> bool:
    repo = image_repository(image.strip())
    return repo == VLLM_IMAGE or repo.endswith("/" + VLLM_IMAGE)


def _after_python_module(tokens: list[str], modules: tuple[str, ...]) -> list[str] | None:
    """The arguments after ``python[3] [-opts] -m <module>``; None when not that launcher."""
    if not tokens or not _PYTHON.match(posixpath.basename(tokens[0])):
        return None
    i = 1
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
        i += 1
    if i + 1 < len(tokens) and tokens[i] == "-m" and tokens[i + 1] in modules:
        return tokens[i + 2 :]
    return None


def vllm_engine_args(container: dict[str, Any]) -> list[str]:
    """The arguments vLLM's own parser reads (launcher removed); UnreadableError for a
    launcher not read here."""
    tokens = [str(t) for t in cli_tokens(container)]
    if not container.get("command") and is_vllm_openai_image(str(container.get("image") or "")):
        tokens = [*VLLM_IMAGE_ENTRYPOINT, *tokens]
    if len(tokens) >= 2 and posixpath.basename(tokens[0]) == "vllm" and tokens[1] == "serve":
        return tokens[2:]
    rest = _after_python_module(tokens, (VLLM_API_SERVER_MODULE,))
    if rest is not None:
        return rest
    shown = " ".join(tokens[:3]) or "(the image's entrypoint)"
    raise UnreadableError(f"unknown launcher {shown!r}")


def sglang_engine_args(container: dict[str, Any]) -> list[str]:
    tokens = [str(t) for t in cli_tokens(container)]
    rest = _after_python_module(tokens, SGLANG_SERVER_MODULES)
    if rest is not None:
        return rest
    shown = " ".join(tokens[:3]) or "(the image's entrypoint)"
    raise UnreadableError(f"unknown launcher {shown!r}")


# ------------------------------------------------------------------ flags


def _normal(name: str) -> str:
    """A long flag with ``_`` spelled ``-``, as vLLM's FlexibleArgumentParser reads it."""
    return name.replace("_", "-") if name.startswith("--") else name


def _spelling_of(name: str, table: dict[str, tuple[str, ...]]) -> str | None:
    """The dimension a flag name sets, or None."""
    for dimension, spellings in table.items():
        if name in spellings:
            return dimension
    return None


def _other_spelling(name: str, table: dict[str, tuple[str, ...]]) -> bool:
    """A flag argparse might take as a parallelism flag under another spelling: an
    abbreviation of a long flag, or a short alias with its value attached."""
    for spellings in table.values():
        for spelling in spellings:
            if spelling.startswith("--"):
                if len(name) > 3 and spelling.startswith(name) and name != spelling:
                    return True
            elif name.startswith(spelling) and name != spelling and name[len(spelling) :].isdigit():
                return True
    return False


# Dimensions whose value is an index (a rank), where 0 is valid.
INDEX_DIMENSIONS: Final = frozenset({DP_RANK})


def _integer(flag: str, value: str, minimum: int) -> int:
    if "$(" in value and "$$(" not in value:
        raise UnreadableError(f"{flag} {value!r} is an unexpanded $(VAR)")
    text = value.strip()
    if not text.isdigit() or int(text) < minimum:
        kind = "a non-negative" if minimum == 0 else "a positive"
        raise UnreadableError(f"{flag} {value!r} is not {kind} integer")
    return int(text)


def parallel_flags(args: list[str], table: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Dimension -> value from the engine arguments (last occurrence wins);
    UnreadableError for a form not read here."""
    found: dict[str, int] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token.startswith("$(") and i > 0 and not _is_value(args, i):
            raise UnreadableError(f"argument {token!r} is an unexpanded $(VAR)")
        if not token.startswith("-") or token in ("-", "--"):
            i += 1
            continue
        name, eq, inline = token.partition("=")
        name = _normal(name)
        if name in CONFIG_FLAGS:
            raise UnreadableError(f"{name} reads the engine arguments from a file")
        dimension = _spelling_of(name, table)
        if dimension is None:
            if _other_spelling(name, table):
                raise UnreadableError(f"{token!r} is not a parallelism spelling read here")
            i += 1
            continue
        minimum = 0 if dimension in INDEX_DIMENSIONS else 1
        if eq:
            found[dimension] = _integer(name, inline, minimum)
            i += 1
            continue
        if i + 1 >= len(args):
            raise UnreadableError(f"{name} has no value")
        found[dimension] = _integer(name, args[i + 1], minimum)
        i += 2
    return found


def _is_value(args: list[str], i: int) -> bool:
    """Whether ``args[i]`` is the value of the flag before it (``--flag value``); the
    first argument is the model positional of ``vllm serve``."""
    before = args[i - 1]
    return before.startswith("-") and "=" not in before


def _per_node(world: int, nodes: int) -> int:
    if world % nodes:
        raise UnreadableError(f"{world} ranks do not divide over --nnodes {nodes}")
    return world // nodes


def external_lb(args: list[str]) -> bool:
    """The last of ``--data-parallel-external-lb`` / its ``--no-`` form wins."""
    on = False
    for token in args:
        name = _normal(token.split("=", 1)[0])
        if name == DP_EXTERNAL_LB:
            on = True
        elif name == NO_DP_EXTERNAL_LB:
            on = False
    return on


def vllm_processes_per_pod(flags: dict[str, int], external: bool = False) -> int:
    """The worker processes one pod runs (vLLM's ``create_engine_config``): a
    data-parallel rank is TP x PP x PCP workers (``ParallelConfig.world_size``).

    - ``--nnodes N`` > 1 (0.33): the DP x TP x PP x PCP ranks spread evenly over the N
      nodes, this pod running its share (vLLM refuses a share that is not whole);
    - else one rank per pod in external load-balancer mode (``-dpn`` given, or
      ``--data-parallel-external-lb``), else ``-dpl`` ranks when given, else all
      ``-dp`` ranks."""
    world = flags.get(TP, 1) * flags.get(PP, 1) * flags.get(PCP, 1)
    nodes = flags.get(NNODES, 1)
    if nodes > 1:
        return _per_node(world * flags.get(DP, 1), nodes)
    if external or DP_RANK in flags:
        return world
    return world * flags.get(DPL, flags.get(DP, 1))


def vllm_process_count(
    container: dict[str, Any], extra_args: list[str] | None = None
) -> ProcessCount:
    """The vLLM worker processes of a pod running ``container`` (``extra_args``:
    engineOverrides.args, appended after the container's own)."""
    try:
        args = [*vllm_engine_args(container), *(extra_args or [])]
        flags = parallel_flags(args, VLLM_PARALLEL_FLAGS)
        return ProcessCount(vllm_processes_per_pod(flags, external_lb(args)))
    except UnreadableError as exc:
        return ProcessCount(1, str(exc))


def vllm_engines_in_pod(
    container: dict[str, Any], extra_args: list[str] | None = None
) -> tuple[Fraction, str | None]:
    """The vLLM engines (data-parallel ranks) a pod running ``container`` holds: its
    worker processes over one engine's TP x PP x PCP workers; a fraction for a
    multi-node launch whose engine spans pods. (1, why) when the count is unreadable."""
    try:
        args = [*vllm_engine_args(container), *(extra_args or [])]
        flags = parallel_flags(args, VLLM_PARALLEL_FLAGS)
        processes = vllm_processes_per_pod(flags, external_lb(args))
    except UnreadableError as exc:
        return Fraction(1), str(exc)
    world = flags.get(TP, 1) * flags.get(PP, 1) * flags.get(PCP, 1)
    return Fraction(processes, world), None


def sglang_ranks_per_pod(args: list[str], flags: dict[str, int]) -> int:
    ranks = flags.get(TP, 1) * flags.get(PP, 1)
    if SGLANG_DP_ATTENTION not in args:
        ranks *= flags.get(DP, 1)
    return _per_node(ranks, flags.get(NNODES, 1))


def sglang_rank_count(container: dict[str, Any]) -> ProcessCount:
    """The SGLang scheduler ranks of a pod running ``container``."""
    try:
        args = sglang_engine_args(container)
        return ProcessCount(sglang_ranks_per_pod(args, parallel_flags(args, SGLANG_PARALLEL_FLAGS)))
    except UnreadableError as exc:
        return ProcessCount(1, str(exc))
