"""SGLang + LMCache in MP mode: --enable-lmcache, a config file and the lmcache-mp-worker sidecar.

SGLang drives LMCache in multiprocess mode: the engine reads ``--lmcache-config-file``
(mp_host/mp_port) and attaches over ZMQ plus a shared-memory data path to a node-local
LMCache MP server. This adapter renders, on the engine pod:

- engine container (the only one, or the one named ``sglang``): ``--enable-lmcache``,
  ``--lmcache-config-file /etc/lmcache/lmcache-mp.yaml``, ``LMCACHE_USE_EXPERIMENTAL=True``,
  ``INFERENCECACHE_FAIL_OPEN``, the ``lmcache-config`` mount at ``/etc/lmcache`` (read-only)
  and ``/dev/shm``;
- native sidecar ``lmcache-mp-worker`` (an init container with ``restartPolicy: Always``,
  Kubernetes >= 1.29) from spec.lmCache.workerImage or the engine image. Its command is
  ``python3 -c <bootstrap>``: the bootstrap writes the config file from env, then execs
  ``python3 -m lmcache.v1.multiprocess.server --host 127.0.0.1 --port <workerPort>
  --chunk-size <n> --l1-size-gb <whole GiB> --eviction-policy LRU`` plus
  ``--l2-adapter {"type":"resp","host":...,"port":...}`` with a RESP (Redis) binding only;
  for a managed Redis, the env var ``LMCACHE_RESP_PASSWORD`` as a secretKeyRef to the
  backend's password Secret, which LMCache's resp adapter reads itself: the password is
  never in the spec, nor (expanded) on the worker's command line.
  No shell: the engine image may not have one. ``--eviction-policy LRU`` keeps a full L1
  storing new chunks instead of refusing them. ``NVIDIA_VISIBLE_DEVICES=all`` lets the
  GPU-less worker CUDA-IPC the engine's GPU; an exec startup probe (a loopback TCP
  connect: kubelet's tcpSocket probe would dial the pod IP, where the worker does not
  listen) gates the engine's start on the ZMQ port;
- volumes ``lmcache-config`` (emptyDir) and, unless the engine already mounts its own
  ``/dev/shm``, ``lmcache-dshm`` (emptyDir, medium Memory, sizeLimit = hostMemory).

Reserved names (``lmcache-mp-worker``, volumes ``lmcache-config``/``lmcache-dshm``, mount
path ``/etc/lmcache``) found on a pod the adapter has not wired are an operator's
objects: InjectionRejectedError, never overwritten. The adapter recognises its own worker by
the marker env ``INFERENCECACHE_RENDERED_BY=inference-cache`` and then converges on the
current render. A read-only ``/dev/shm`` or one backed by a configMap, secret,
downwardAPI or projected volume is rejected too: the MP data path writes there.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.jsoncopy import json_copy
from shared.runtime_adapters.base import InjectContext, InjectionRejectedError, RuntimeAdapter
from shared.runtime_adapters.engine import SGLangEngine
from shared.runtime_adapters.host_memory_fit import SHM_PATH
from shared.runtime_adapters.kv_config import decline_sglang_decode_without_radix_cache
from shared.runtime_adapters.overrides import override_arg_tokens
from shared.runtime_adapters.podspec import (
    adopt_container,
    adopt_volume,
    all_containers,
    cli_tokens,
    find_named,
    mount_at,
    normalize_path,
    runs_shell_script,
    upsert_arg,
    upsert_env,
    upsert_flag,
    upsert_mount_by_name,
)
from shared.runtime_adapters.security import (
    engine_image_security_context,
    fit_to_engine,
    worker_resources,
)
from shared.runtime_adapters.sizing import host_memory_bytes, whole_gib

ENABLE_LMCACHE = "--enable-lmcache"
LMCACHE_CONFIG_FILE = "--lmcache-config-file"
WORKER_CONTAINER = "lmcache-mp-worker"
CONFIG_VOLUME = "lmcache-config"
DSHM_VOLUME = "lmcache-dshm"
CONFIG_DIR = "/etc/lmcache"
CONFIG_PATH = f"{CONFIG_DIR}/lmcache-mp.yaml"
LOOPBACK = "127.0.0.1"
# Marks the worker as this adapter's render, so re-injection converges instead of
# treating its own sidecar as an operator's squatting the reserved name.
MARKER_ENV = "INFERENCECACHE_RENDERED_BY"
MARKER_VALUE = "inference-cache"
CONFIG_FILE_ENV = "INFERENCECACHE_LMCACHE_CONFIG_FILE"
CONFIG_CONTENT_ENV = "INFERENCECACHE_LMCACHE_CONFIG"
# Volume sources the MP data path cannot write through.
READ_ONLY_SOURCES = ("configMap", "secret", "downwardAPI", "projected")

# Written atomically (tmp + rename) so the engine never reads a half-written file.
WORKER_BOOTSTRAP = """\
import os, sys
path = os.environ["INFERENCECACHE_LMCACHE_CONFIG_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as handle:
    handle.write(os.environ["INFERENCECACHE_LMCACHE_CONFIG"])
os.replace(path + ".tmp", path)
os.execv(sys.executable, [sys.executable, "-m", "lmcache.v1.multiprocess.server", *sys.argv[1:]])
"""
PORT_PROBE = (
    "import socket, sys; "
    "socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2).close()"
)


def config_file_content(chunk_size: int, port: int) -> str:
    return f'chunk_size: {chunk_size}\nmp_host: "{LOOPBACK}"\nmp_port: {port}\n'


def split_host_port(endpoint: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host without brackets, port)."""
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InjectionRejectedError(f"RESP endpoint {endpoint!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)


# The worker's Redis password: an env var from a secretKeyRef, so the pod spec carries
# only the Secret's name. It is NOT referenced in the --l2-adapter JSON: a $(VAR) there
# would be expanded by the kubelet into the process's argv, readable by anyone who can
# list processes on the node. LMCache's resp adapter (0.4.7, 0.5.6) reads this very
# variable itself when the adapter config carries no "password" key.
RESP_PASSWORD_ENV = "LMCACHE_RESP_PASSWORD"
RESP_PASSWORD_KEY = "password"


def l2_adapter_arg(binding: Binding) -> str:
    """The worker's --l2-adapter JSON for a RESP (Redis) binding."""
    host, port = split_host_port(binding.endpoint)
    config: dict[str, Any] = {"type": "resp", "host": host, "port": port}
    return json.dumps(config, separators=(",", ":"))


def worker_password_env(binding: Binding | None) -> list[dict[str, Any]]:
    """The worker's password env var for a RESP binding with credentials, else none."""
    if binding is None or binding.protocol != "resp" or not binding.password_secret:
        return []
    ref: dict[str, Any] = {"name": binding.password_secret, "key": RESP_PASSWORD_KEY}
    if binding.password_optional:
        ref["optional"] = True
    return [{"name": RESP_PASSWORD_ENV, "valueFrom": {"secretKeyRef": ref}}]


def worker_args(chunk_size: int, port: int, l1_gib: int, binding: Binding | None) -> list[str]:
    args = [
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--chunk-size",
        str(chunk_size),
        "--l1-size-gb",
        str(l1_gib),
        "--eviction-policy",
        "LRU",
    ]
    if binding is not None and binding.protocol == "resp":
        args += ["--l2-adapter", l2_adapter_arg(binding)]
    return args


def is_own_worker(container: dict[str, Any] | None) -> bool:
    if container is None:
        return False
    return any(
        e.get("name") == MARKER_ENV and e.get("value") == MARKER_VALUE
        for e in container.get("env") or []
    )


def prior_injection(pod: dict[str, Any]) -> bool:
    """True when the pod carries this adapter's own worker (a re-admitted wired pod)."""
    return is_own_worker(
        find_named((pod.get("spec") or {}).get("initContainers"), WORKER_CONTAINER)
    )


def reject_reserved_name_squatting(pod: dict[str, Any], ours: bool) -> None:
    """Spec "Names the MP wire reserves on the engine pod"."""
    spec = pod.get("spec") or {}
    if not ours:
        if find_named(all_containers(pod), WORKER_CONTAINER) is not None:
            raise InjectionRejectedError(
                f"the pod already has a container named {WORKER_CONTAINER!r} that "
                "inference-cache did not render; rename it to let the pod be wired"
            )
        for name in (CONFIG_VOLUME, DSHM_VOLUME):
            if find_named(spec.get("volumes"), name) is not None:
                raise InjectionRejectedError(
                    f"the pod already has a volume named {name!r} that inference-cache did "
                    "not render; rename it to let the pod be wired"
                )
    for container in all_containers(pod):
        for mount in container.get("volumeMounts") or []:
            path = normalize_path(str(mount.get("mountPath") or ""))
            if path == CONFIG_DIR and not (ours and mount.get("name") == CONFIG_VOLUME):
                raise InjectionRejectedError(
                    f"container {container.get('name')!r} mounts {mount.get('name')!r} at "
                    f"{CONFIG_DIR}, a path inference-cache reserves for the LMCache MP config"
                )
            if not ours and mount.get("name") in (CONFIG_VOLUME, DSHM_VOLUME):
                raise InjectionRejectedError(
                    f"container {container.get('name')!r} mounts reserved volume name "
                    f"{mount.get('name')!r}"
                )


def plan_dev_shm(pod: dict[str, Any], engine: dict[str, Any], ours: bool) -> dict[str, Any] | None:
    """The worker's /dev/shm mount when reusing the engine's own volume; None to render
    ``lmcache-dshm`` (the engine mounts none, or mounts the adapter's own)."""
    mount = mount_at(engine, SHM_PATH)
    if mount is None:
        return None
    if mount.get("readOnly"):
        raise InjectionRejectedError(
            f"container {engine.get('name')!r} mounts {SHM_PATH} read-only; the LMCache MP "
            "data path writes there"
        )
    name = mount.get("name")
    if name == DSHM_VOLUME:
        if not ours:
            raise InjectionRejectedError(
                f"volume name {DSHM_VOLUME!r} is reserved by inference-cache"
            )
        return None
    volume = find_named((pod.get("spec") or {}).get("volumes"), str(name))
    if volume is None:
        raise InjectionRejectedError(f"{SHM_PATH} is mounted from undeclared volume {name!r}")
    for source in READ_ONLY_SOURCES:
        if source in volume:
            raise InjectionRejectedError(
                f"{SHM_PATH} is backed by a {source} volume ({name!r}); the LMCache MP data "
                "path needs a writable volume such as emptyDir {medium: Memory}"
            )
    reused = {k: v for k, v in mount.items() if k in ("name", "subPath", "subPathExpr")}
    return {**reused, "mountPath": SHM_PATH}


def dshm_volume(capacity: str | int, l1_gib: int, capacity_bytes: int) -> dict[str, Any]:
    # The L1 lives in /dev/shm: size it to the budget, or to the 1 GiB minimum L1 the
    # worker allocates when the budget is smaller.
    size = str(capacity) if capacity_bytes >= l1_gib * 1024**3 else f"{l1_gib}Gi"
    return {"name": DSHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def render_worker(
    *,
    image: str,
    pull_policy: str | None,
    args: list[str],
    chunk_size: int,
    port: int,
    shm_mount: dict[str, Any],
    l1_gib: int,
    security_context: dict[str, Any],
    engine: dict[str, Any] | None = None,
    extra_env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    worker: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": image,
        "restartPolicy": "Always",
        "command": ["python3", "-c", WORKER_BOOTSTRAP],
        "args": args,
        "env": [
            {"name": MARKER_ENV, "value": MARKER_VALUE},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": CONFIG_FILE_ENV, "value": CONFIG_PATH},
            {"name": CONFIG_CONTENT_ENV, "value": config_file_content(chunk_size, port)},
            *(extra_env or []),
        ],
        "startupProbe": {
            "exec": {"command": ["python3", "-c", PORT_PROBE, str(port)]},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "successThreshold": 1,
            # Ten minutes: importing torch and pinning a large L1 can take a while.
            "failureThreshold": 120,
        },
        "volumeMounts": [
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR},
            shm_mount,
        ],
        # Requests and limits for a namespace ResourceQuota, within every LimitRange the
        # engine container fits; restricted Pod Security.
        "resources": fit_to_engine(worker_resources(l1_gib), engine),
        "securityContext": security_context,
    }
    if pull_policy:
        worker["imagePullPolicy"] = pull_policy
    return worker


class SGLangLMCacheAdapter(SGLangEngine, RuntimeAdapter):
    name: ClassVar[str] = "SGLang+LMCache"
    runtime: ClassVar[str] = c.RUNTIME_SGLANG
    cache_type: ClassVar[str] = c.TYPE_LMCACHE
    reserved_args: ClassVar[tuple[str, ...]] = ("--enable-lmcache", "--lmcache-config-file")
    reserved_env: ClassVar[tuple[str, ...]] = (
        "LMCACHE_USE_EXPERIMENTAL",
        "INFERENCECACHE_FAIL_OPEN",
    )
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset({None, "resp"})

    def wire(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        spec = backend.spec
        role = effective.integration_role(spec)
        if role != c.ROLE_READ_WRITE:
            # rejectUnsupportedSGLangRole, again: never silently treat it as ReadWrite.
            raise InjectionRejectedError(f"SGLang with LMCache supports only ReadWrite, not {role}")
        index = self.engine_container_index(pod)
        engine_in = pod["spec"]["containers"][index]
        decline_sglang_decode_without_radix_cache(
            [*cli_tokens(engine_in), *override_arg_tokens(backend)], "LMCache"
        )
        if runs_shell_script(engine_in):
            raise InjectionRejectedError(
                f"container {engine_in.get('name')!r} runs a shell script (sh -c); flags "
                "appended to args would not reach SGLang: put the SGLang CLI in command/args"
            )
        ours = prior_injection(pod)
        reject_reserved_name_squatting(pod, ours)
        reused_shm = plan_dev_shm(pod, engine_in, ours)

        chunk_size = effective.chunk_size_tokens(spec)
        port = effective.worker_port(spec)
        capacity_bytes = host_memory_bytes(spec)
        l1_gib = whole_gib(capacity_bytes)
        worker_image = (spec.lm_cache.worker_image if spec.lm_cache else None) or engine_in.get(
            "image"
        )
        if not worker_image:
            raise InjectionRejectedError("no MP-worker image: set spec.lmCache.workerImage")
        shm_mount = reused_shm or {"name": DSHM_VOLUME, "mountPath": SHM_PATH}
        worker = render_worker(
            image=str(worker_image),
            pull_policy=None
            if spec.lm_cache and spec.lm_cache.worker_image
            else engine_in.get("imagePullPolicy"),
            args=worker_args(chunk_size, port, l1_gib, binding),
            chunk_size=chunk_size,
            port=port,
            shm_mount=shm_mount,
            l1_gib=l1_gib,
            security_context=engine_image_security_context(engine_in),
            engine=engine_in,
            extra_env=worker_password_env(binding),
        )

        out = json_copy(pod)
        engine = out["spec"]["containers"][index]
        upsert_flag(engine, ENABLE_LMCACHE)
        upsert_arg(engine, LMCACHE_CONFIG_FILE, CONFIG_PATH)
        upsert_env(engine, "LMCACHE_USE_EXPERIMENTAL", "True")
        upsert_env(
            engine, "INFERENCECACHE_FAIL_OPEN", "true" if effective.fail_open(spec) else "false"
        )
        upsert_mount_by_name(
            engine, {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}
        )
        adopt_volume(out, {"name": CONFIG_VOLUME, "emptyDir": {}}, ours)
        if reused_shm is None:
            upsert_mount_by_name(engine, {"name": DSHM_VOLUME, "mountPath": SHM_PATH})
            capacity = effective.host_memory_capacity(spec)
            adopt_volume(out, dshm_volume(capacity, l1_gib, int(capacity_bytes)), ours)
        adopt_container(out, "initContainers", worker, ours)
        return out
