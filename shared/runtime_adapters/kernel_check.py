"""The ``lmcache-kernel-check`` init container (vLLM + LMCache only).

LMCache replaces its native extension by a slow pure-torch fallback when the
extension fails to load (e.g. a CUDA-13 wheel on a CUDA-12 image), so importing it
proves nothing. The extension has two names: ``lmcache.c_ops`` up to 0.4.x (``import
lmcache`` imports it, and installs the fallback under that name when it fails) and
``lmcache.cuda_ops`` from 0.5 (``CudaDeviceOps.ensure_native`` in
``lmcache/v1/platform/devices/cuda/device_ops.py`` imports it, and stays on the torch
baseline when it fails). The check force-loads the compiled extension *from disk* in the
engine's own image and reports a machine-readable verdict through the termination
message, which the controller turns into the EngineKernelsHealthy condition.

Mode, from the CacheBackend annotation ``inferencecache.io/lmcache-kernel-check``:

- ``auto`` or unset: report-only, injected only when the engine requests a GPU
  (the kernels are GPU-only; a CPU build legitimately has none);
- ``report-only``: always injected, exits 0 even on failure (never blocks the pod);
- ``strict``: always injected, exits 1 on failure (the pod stays in Init);
- ``off``: never injected.

The check runs ``python3`` directly, never through a shell, because a minimal or
distroless engine image may lack ``/bin/sh``; a shell wrapper meant to force exit 0
would then itself block the pod.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from shared import constants as c
from shared.runtime_adapters.base import InjectionRejectedError
from shared.runtime_adapters.podspec import find_named, merge_container
from shared.runtime_adapters.security import engine_image_security_context
from shared.runtime_adapters.sizing import requests_gpu

CONTAINER_NAME = "lmcache-kernel-check"
MODE_ENV = "INFERENCECACHE_KERNEL_CHECK_MODE"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# What the check copies from the engine container it checks (never an extended resource
# such as nvidia.com/gpu, nor hugepages: loading the extension needs no device).
COPIED_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
# For cpu or memory the engine declares neither a request nor a limit for: a small
# request, so a ResourceQuota or LimitRange that demands requests is still satisfied.
SMALL_REQUESTS: Final[dict[str, str]] = {"cpu": "10m", "memory": "64Mi"}

# The verdict is one JSON object on the termination message: {"mode", "result", "error",
# "extension", "versions"}.
# - "extension" (absent when no extension file was found) names the module the check
#   loaded, or tried to load when "result" is "failed". A wheel ships one of the two names:
#   the check loads cuda_ops*.so (LMCache >= 0.5) or c_ops*.so (LMCache <= 0.4), the one
#   the installed release imports first when its version is known, with
#   ExtensionFileLoader under that module name (the name selects the PyInit_<name> entry
#   point), after `import torch` (the extension links libtorch). find_spec('lmcache')
#   locates the package without running its __init__, which installs the fallback.
# - "versions": the installed releases of lmcache, vllm and torch, read from the image's
#   package metadata (importlib.metadata, which imports nothing); a package that is not
#   installed is absent from it, so a client the engine pip-installs at start is absent,
#   never guessed. Read before anything can fail, so a failed verdict carries them too.
SCRIPT = """\
import glob, importlib.machinery, importlib.util, json, os, re, sys
mode = os.environ.get("INFERENCECACHE_KERNEL_CHECK_MODE", "report-only")
verdict = {"mode": mode, "result": "failed", "error": "", "versions": {}}
try:
    from importlib import metadata
    for package in ("lmcache", "vllm", "torch"):
        try:
            verdict["versions"][package] = str(metadata.version(package))
        except Exception:
            pass
except Exception:
    pass
names = ("cuda_ops", "c_ops")
release = re.match(r"(\\d+)\\.(\\d+)", verdict["versions"].get("lmcache", ""))
if release and (int(release.group(1)), int(release.group(2))) < (0, 5):
    names = ("c_ops", "cuda_ops")
try:
    import torch  # noqa: F401  the extension links libtorch
    spec = importlib.util.find_spec("lmcache")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("lmcache is not importable in the engine image")
    found = []
    for name in names:
        for location in spec.submodule_search_locations:
            for path in sorted(glob.glob(os.path.join(location, name + "*.so"))):
                found.append((name, path))
    if not found:
        raise ImportError(
            "no compiled lmcache native extension in the lmcache package: neither "
            "cuda_ops*.so (LMCache >= 0.5) nor c_ops*.so (LMCache <= 0.4)"
        )
    name, path = found[0]
    module = "lmcache." + name
    verdict["extension"] = module
    loader = importlib.machinery.ExtensionFileLoader(module, path)
    module_spec = importlib.util.spec_from_file_location(module, path, loader=loader)
    loader.exec_module(importlib.util.module_from_spec(module_spec))
    verdict["result"] = "ok"
except BaseException as exc:
    verdict["error"] = ("%s: %s" % (type(exc).__name__, exc))[:3000]
message = json.dumps(verdict, sort_keys=True)
print(message, flush=True)
try:
    with open("/dev/termination-log", "w") as handle:
        handle.write(message)
except OSError:
    pass
sys.exit(1 if mode == "strict" and verdict["result"] != "ok" else 0)
"""


def requested_mode(backend_annotations: dict[str, str] | None) -> str:
    """The annotation value, trimmed and lower-cased; unset means ``auto``.

    An unrecognised value (a CacheBackend stored before the admission rule shipped) is
    rejected rather than guessed: treating ``strcit`` as report-only would silently relax
    strict enforcement, treating it as strict could block serving.
    """
    raw = (backend_annotations or {}).get(c.ANNOTATION_LMCACHE_KERNEL_CHECK)
    if raw is None or not raw.strip():
        return c.KERNEL_CHECK_AUTO
    mode = raw.strip().lower()
    if mode not in c.KERNEL_CHECK_MODES:
        raise InjectionRejectedError(
            f"annotation {c.ANNOTATION_LMCACHE_KERNEL_CHECK}={raw!r} is not one of "
            f"{', '.join(c.KERNEL_CHECK_MODES)}"
        )
    return mode


def admitted_mode(requested: str, engine: dict[str, Any]) -> str | None:
    """The mode the check runs in on this pod, or None when it is not injected."""
    if requested == c.KERNEL_CHECK_OFF:
        return None
    if requested == c.KERNEL_CHECK_AUTO:
        return c.KERNEL_CHECK_REPORT_ONLY if requests_gpu(engine) else None
    return requested


def check_resources(engine: dict[str, Any]) -> dict[str, Any]:
    """The check's resources: the engine's own cpu, memory and ephemeral-storage
    requests and limits, and none of its extended resources; a small request for cpu
    or memory where the engine declares neither.

    An init container runs before the app containers, so a pod's effective request
    and limit of a resource is the larger of its largest init container's and the sum
    of its app containers' (native sidecars count in that sum). A check no larger than
    the engine therefore adds nothing to what a ResourceQuota charges, declares every
    request and limit a quota on the engine's namespace demands (the engine declares
    them), fits every per-container LimitRange bound the engine fits, and gives
    ``import torch`` the engine's memory rather than a limit of our choosing."""
    declared = engine.get("resources")
    if not isinstance(declared, dict):
        declared = {}
    out: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for section in ("requests", "limits"):
        values = declared.get(section)
        if not isinstance(values, dict):
            continue
        for name in COPIED_RESOURCES:
            if name in values:
                out[section][name] = copy.deepcopy(values[name])
    for name, small in SMALL_REQUESTS.items():
        if name not in out["requests"] and name not in out["limits"]:
            out["requests"][name] = small
    return {section: values for section, values in out.items() if values}


def render_check(mode: str, engine: dict[str, Any]) -> dict[str, Any]:
    """The init container, in the engine's image and pull policy."""
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": engine.get("image"),
        "command": ["python3", "-c", SCRIPT],
        "env": [{"name": MODE_ENV, "value": mode}],
        "resources": check_resources(engine),
        # Restricted Pod Security, with the engine's own run-as identity (the check
        # runs from the engine's image).
        "securityContext": engine_image_security_context(engine),
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if engine.get("imagePullPolicy"):
        container["imagePullPolicy"] = engine["imagePullPolicy"]
    return container


def converge_check(pod: dict[str, Any], mode: str | None, engine: dict[str, Any]) -> None:
    """Put the check in ``initContainers`` (a normal init container: it runs and exits
    before the engine starts), or take a prior one out when the mode is now off."""
    spec = pod.setdefault("spec", {})
    inits = list(spec.get("initContainers") or [])
    existing = [i for i, ic in enumerate(inits) if ic.get("name") == CONTAINER_NAME]
    if mode is None:
        if existing:
            inits = [ic for ic in inits if ic.get("name") != CONTAINER_NAME]
            if inits:
                spec["initContainers"] = inits
            else:
                spec.pop("initContainers", None)
        return
    desired = render_check(mode, engine)
    if existing:
        # The name is the check's own; a re-admitted pod converges onto the current
        # render with the API server's defaulted fields kept.
        inits[existing[0]] = merge_container(inits[existing[0]], desired)
    else:
        if find_named(spec.get("containers"), CONTAINER_NAME) is not None:
            raise InjectionRejectedError(
                f"container name {CONTAINER_NAME!r} is used by a regular container of the pod"
            )
        inits.append(desired)
    spec["initContainers"] = inits


def mode_on_pod(pod: dict[str, Any]) -> str | None:
    """The mode the pod's check container runs in (what the webhook records), if any."""
    check = find_named((pod.get("spec") or {}).get("initContainers"), CONTAINER_NAME)
    if check is None:
        return None
    for var in check.get("env") or []:
        if var.get("name") == MODE_ENV:
            value = var.get("value")
            return str(value) if value else None
    return None
