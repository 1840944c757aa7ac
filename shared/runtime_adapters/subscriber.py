"""The ``kvevent-subscriber`` sidecar, rendered exactly as docs/server-contract.md specifies.

It reads the engine's ZMQ KV-event stream on loopback and reports it to the cache-index
server, which is what cache-aware routing (tier-1) runs on. It is appended as a regular
container only when the webhook runs with ``--kvevent-subscriber-image`` and the backend
has ``spec.observation.modelID``.

Engine KV-events port. The engine publishes on the endpoint of its own
``--kv-events-config`` JSON (``{"publisher":"zmq","endpoint":"tcp://*:5557",...}``); the
port is read from there when the engine declares one, else the vLLM/SGLang default 5557
is used. The adapter does not add ``--kv-events-config``: the publisher is operator-owned.

``kvevent-subscriber`` is a reserved container name: an existing container of that name
(the webhook's prior render, or a hand-attached subscriber) is converged onto the
current render rather than duplicated, since two subscribers would double-report.
"""

from __future__ import annotations

import json
import re
from typing import Any

from shared import constants as c
from shared.runtime_adapters.base import InjectionRejectedError
from shared.runtime_adapters.engine import SUBSCRIBER_CONTAINER
from shared.runtime_adapters.podspec import cli_tokens, find_flag, find_named, merge_container
from shared.runtime_adapters.security import (
    SUBSCRIBER_RESOURCES,
    fit_to_engine,
    own_image_security_context,
)

DEFAULT_KV_EVENTS_PORT = 5557
KV_EVENTS_CONFIG = "--kv-events-config"
HASH_SCHEME = {c.RUNTIME_VLLM: "vllm", c.RUNTIME_SGLANG: "sglang"}
_TCP_PORT = re.compile(r"^tcp://.*:(\d{1,5})$")


def kv_events_port(engine: dict[str, Any] | None) -> int:
    """The port of the engine's ``--kv-events-config`` zmq endpoint, else 5557."""
    if engine is None:
        return DEFAULT_KV_EVENTS_PORT
    for occ in find_flag(cli_tokens(engine), KV_EVENTS_CONFIG):
        try:
            config = json.loads(occ.value or "")
        except ValueError:
            continue
        endpoint = config.get("endpoint") if isinstance(config, dict) else None
        match = _TCP_PORT.match(endpoint.strip()) if isinstance(endpoint, str) else None
        if match and 1 <= int(match.group(1)) <= 65535:
            return int(match.group(1))
    return DEFAULT_KV_EVENTS_PORT


def subscriber_args(
    *, port: int, server_address: str, model_id: str, hash_scheme: str, offload: bool
) -> list[str]:
    args = [
        f"--engine-endpoint=tcp://127.0.0.1:{port}",
        f"--server={server_address}",
        "--replica-id=$(POD_NAME)",
        "--tenant-id=$(POD_NAMESPACE)",
        f"--model-id={model_id}",
        f"--hash-scheme={hash_scheme}",
    ]
    if offload:
        # Offload keeps an evicted block in the LMCache L2: re-report it at tier T2
        # instead of pruning the hint (EventsOnly has no L2, so evictions prune).
        args.append("--ignore-block-removed=true")
    return args


def _field_env(name: str, path: str) -> dict[str, Any]:
    # apiVersion is what the API server defaults it to, so a persisted pod re-renders equal.
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def render_subscriber(
    *,
    image: str,
    port: int,
    server_address: str,
    model_id: str,
    runtime: str,
    offload: bool,
    engine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "name": SUBSCRIBER_CONTAINER,
        "image": image,
        "args": subscriber_args(
            port=port,
            server_address=server_address,
            model_id=model_id,
            hash_scheme=HASH_SCHEME[runtime],
            offload=offload,
        ),
        "env": [
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
        ],
        # Requests and limits for a namespace ResourceQuota, within every LimitRange the
        # engine container fits; restricted Pod Security.
        "resources": fit_to_engine(SUBSCRIBER_RESOURCES, engine),
        "securityContext": own_image_security_context({}),
    }


def converge_subscriber(pod: dict[str, Any], desired: dict[str, Any]) -> None:
    """Append the sidecar to ``spec.containers``, or converge an existing one in place.

    The securityContext is settled here, against the pod: runAsNonRoot is left out on a
    pod that explicitly runs as root (see shared.runtime_adapters.security).
    """
    desired = {**desired, "securityContext": own_image_security_context(pod)}
    spec = pod.setdefault("spec", {})
    if find_named(spec.get("initContainers"), SUBSCRIBER_CONTAINER) is not None:
        raise InjectionRejectedError(
            f"container name {SUBSCRIBER_CONTAINER!r} is reserved for the KV-event subscriber "
            "and used by an init container of the pod"
        )
    containers = list(spec.get("containers") or [])
    for i, container in enumerate(containers):
        if container.get("name") == SUBSCRIBER_CONTAINER:
            containers[i] = merge_container(container, desired)
            break
    else:
        containers.append(desired)
    spec["containers"] = containers
