"""Which container of a pod is the inference engine.

The spec fixes the SGLang rule (one container: any name; several: the one named
``sglang``). It is silent for vLLM; the rule chosen here is, in order:

1. the container named ``vllm``;
2. else the only container;
3. else the one container whose image, command or args mention ``vllm``
   (case-insensitive); none or several such containers is ambiguous.

Ambiguity is an ``InjectionRejectedError`` (the pod webhook admits the pod unwired) rather
than a guess, because wiring the wrong container would put the connector into, e.g., a
router sidecar. Containers the webhook itself appends (the kvevent-subscriber) never
count, so a wired pod selects the same engine on re-admission.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from shared.runtime_adapters.base import InjectionRejectedError
from shared.runtime_adapters.podspec import cli_tokens

# Appended by the pod webhook, never an engine (see shared.runtime_adapters.subscriber).
SUBSCRIBER_CONTAINER = "kvevent-subscriber"
VLLM_CONTAINER = "vllm"
SGLANG_CONTAINER = "sglang"


@runtime_checkable
class EngineLocator(Protocol):
    """A runtime adapter that can say which container it wires (for engineOverrides)."""

    def engine_container_index(self, pod: dict[str, Any]) -> int:
        """The index in ``spec.containers`` of the engine container the adapter wires."""


def candidate_indexes(pod: dict[str, Any]) -> list[int]:
    """Indexes of ``spec.containers`` that may be the engine (webhook sidecars excluded)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return [i for i, c in enumerate(containers) if c.get("name") != SUBSCRIBER_CONTAINER]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _mentions_vllm(container: dict[str, Any]) -> bool:
    text = " ".join([str(container.get("image") or ""), *map(str, cli_tokens(container))])
    return "vllm" in text.lower()


def select_vllm_engine(pod: dict[str, Any]) -> int:
    containers = _containers(pod)
    candidates = candidate_indexes(pod)
    for i in candidates:
        if containers[i].get("name") == VLLM_CONTAINER:
            return i
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise InjectionRejectedError("the pod has no container to wire")
    mentioning = [i for i in candidates if _mentions_vllm(containers[i])]
    if len(mentioning) == 1:
        return mentioning[0]
    names = ", ".join(str(containers[i].get("name")) for i in candidates)
    raise InjectionRejectedError(
        f"cannot tell which container is the vLLM engine among [{names}]: name it "
        f"{VLLM_CONTAINER!r}"
    )


def select_sglang_engine(pod: dict[str, Any]) -> int:
    """Spec: a one-container pod may use any name; a multi-container pod names it sglang."""
    containers = _containers(pod)
    candidates = candidate_indexes(pod)
    if len(candidates) == 1:
        return candidates[0]
    for i in candidates:
        if containers[i].get("name") == SGLANG_CONTAINER:
            return i
    if not candidates:
        raise InjectionRejectedError("the pod has no container to wire")
    raise InjectionRejectedError(
        f"a multi-container SGLang pod must name its engine container {SGLANG_CONTAINER!r}"
    )


class VLLMEngine:
    """Mixed into the adapters that wire a vLLM engine: the container is chosen by
    ``select_vllm_engine``."""

    def engine_container_index(self, pod: dict[str, Any]) -> int:
        return select_vllm_engine(pod)


class SGLangEngine:
    """Mixed into the adapters that wire an SGLang engine: the container is chosen by
    ``select_sglang_engine``."""

    def engine_container_index(self, pod: dict[str, Any]) -> int:
        return select_sglang_engine(pod)
