"""Spec "LMCache client kernels": the lmcache-kernel-check init container, per mode.

The detector script itself is executed against fake engine images (a temp directory on
PYTHONPATH with a fake ``torch`` and a fake ``lmcache`` package, with and without a
compiled native extension under LMCache's two names: ``c_ops`` up to 0.4.x, ``cuda_ops``
from 0.5) to check its verdicts and exit codes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from shared import constants as c
from shared.api.models import CacheBackend
from shared.runtime_adapters import kernel_check
from shared.runtime_adapters.base import InjectContext, InjectionRejectedError
from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter
from tests.builders import CTX, assert_valid_pod, init_containers_of
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

ADAPTER = VLLMLMCacheAdapter()
GPU = {"limits": {"nvidia.com/gpu": "1"}}


def wire(mode: str | None, engine: dict[str, Any] | None = None) -> dict[str, Any]:
    annotations = {c.ANNOTATION_LMCACHE_KERNEL_CHECK: mode} if mode is not None else None
    cb = CacheBackend.model_validate(make_backend(annotations=annotations))
    return ADAPTER.inject(make_pod(engine or make_container()), cb, None, InjectContext())


def check_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    return init_containers_of(pod).get("lmcache-kernel-check")


# --------------------------------------------------------------------- modes


@pytest.mark.parametrize("mode", [None, "auto"])
def test_auto_injects_report_only_when_engine_limits_a_gpu(mode: str | None) -> None:
    check = check_of(wire(mode, make_container(resources=GPU)))
    assert check is not None
    assert check["env"] == [{"name": kernel_check.MODE_ENV, "value": "report-only"}]


def test_auto_counts_a_gpu_request_too() -> None:
    check = check_of(wire("auto", make_container(resources={"requests": {"nvidia.com/gpu": 2}})))
    assert check is not None


@pytest.mark.parametrize(
    "resources", [None, {"limits": {"cpu": "4"}}, {"limits": {"nvidia.com/gpu": "0"}}]
)
def test_auto_skips_cpu_engines(resources: dict[str, Any] | None) -> None:
    engine = make_container(resources=resources) if resources else make_container()
    assert check_of(wire("auto", engine)) is None


@pytest.mark.parametrize("mode", ["report-only", "strict"])
def test_report_only_and_strict_always_inject(mode: str) -> None:
    check = check_of(wire(mode))  # CPU engine
    assert check is not None
    assert check["env"] == [{"name": kernel_check.MODE_ENV, "value": mode}]


def test_off_never_injects() -> None:
    assert check_of(wire("off", make_container(resources=GPU))) is None


def test_mode_value_is_trimmed_and_case_insensitive() -> None:
    check = check_of(wire(" Strict "))
    assert check is not None
    assert check["env"][0]["value"] == "strict"


def test_unrecognised_mode_is_rejected_not_guessed() -> None:
    with pytest.raises(InjectionRejectedError, match="strcit"):
        wire("strcit")


def test_not_injected_for_sglang_pairs() -> None:
    from shared.pod_wiring import wire_pod

    backend = make_backend(
        runtime="SGLang", annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK: "strict"}
    )
    pod = make_pod(make_container("sglang", image="lmsysorg/sglang", resources=GPU))
    result = wire_pod(pod, [backend], CTX)
    assert "lmcache-kernel-check" not in init_containers_of(result.pod)
    assert c.ANNOTATION_LMCACHE_KERNEL_CHECK_MODE not in result.pod["metadata"].get(
        "annotations", {}
    )


# ------------------------------------------------------------------- container


def test_container_shape_runs_python3_without_a_shell() -> None:
    engine = make_container(image="vllm/vllm-openai:v0.11.0", imagePullPolicy="Always")
    check = check_of(wire("strict", engine))
    assert check is not None
    assert check["command"][:2] == ["python3", "-c"]
    assert check["command"][2] == kernel_check.SCRIPT
    assert "args" not in check
    assert check["image"] == "vllm/vllm-openai:v0.11.0"
    assert check["imagePullPolicy"] == "Always"
    assert check["terminationMessagePath"] == "/dev/termination-log"
    assert check["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert check["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}}
    assert "restartPolicy" not in check  # a normal init container, not a native sidecar


def test_script_force_loads_from_disk_after_torch() -> None:
    script = kernel_check.SCRIPT
    assert script.index("import torch") < script.index("ExtensionFileLoader")
    assert 'find_spec("lmcache")' in script
    assert '("cuda_ops", "c_ops")' in script
    compile(script, "<kernel-check>", "exec")


def test_check_runs_after_user_init_containers_and_converges() -> None:
    cb = CacheBackend.model_validate(
        make_backend(annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK: "strict"})
    )
    pod = make_pod(
        make_container(), initContainers=[make_container("fetch-model", image="busybox")]
    )
    once = ADAPTER.inject(pod, cb, None, InjectContext())
    assert [ic["name"] for ic in once["spec"]["initContainers"]] == [
        "fetch-model",
        "lmcache-kernel-check",
    ]
    assert ADAPTER.inject(once, cb, None, InjectContext()) == once
    assert_valid_pod(once)


def test_mode_switched_off_removes_a_prior_check() -> None:
    strict = wire("strict")
    cb = CacheBackend.model_validate(
        make_backend(annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK: "off"})
    )
    out = ADAPTER.inject(strict, cb, None, InjectContext())
    assert "initContainers" not in out["spec"]


def test_check_name_used_by_a_regular_container_is_rejected() -> None:
    pod = make_pod(make_container(), make_container("lmcache-kernel-check", image="x"))
    cb = CacheBackend.model_validate(
        make_backend(annotations={c.ANNOTATION_LMCACHE_KERNEL_CHECK: "strict"})
    )
    with pytest.raises(InjectionRejectedError):
        ADAPTER.inject(pod, cb, None, InjectContext())


def test_mode_on_pod_reads_the_admitted_mode() -> None:
    assert kernel_check.mode_on_pod(wire("strict")) == "strict"
    assert kernel_check.mode_on_pod(wire("off")) is None


# ------------------------------------------------------------- the detector


def _fake_image(
    root: Path,
    *,
    torch: bool = True,
    lmcache: bool = True,
    extensions: dict[str, str] | None = None,
    installed: dict[str, str] | None = None,
) -> Path:
    """A fake engine image: ``extensions`` maps an extension module name (``c_ops``,
    ``cuda_ops``) to the shared object copied in as ``lmcache/<name><EXT_SUFFIX>``;
    ``installed`` maps a distribution name to the version of the ``<name>-<version>
    .dist-info/METADATA`` written beside them (what pip leaves in site-packages)."""
    for dist, version in (installed or {}).items():
        info = root / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if torch:
        (root / "torch.py").write_text("LOADED = True\n")
    if lmcache:
        pkg = root / "lmcache"
        pkg.mkdir()
        # The fallback shim LMCache installs on import: must never be what the check runs.
        (pkg / "__init__.py").write_text("raise RuntimeError('lmcache __init__ must not run')\n")
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        for name, built in (extensions or {}).items():
            shutil.copy(built, pkg / f"{name}{suffix}")
    return root


def _run(tmp_path: Path, image: Path, mode: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    log = tmp_path / "termination-log"
    script = kernel_check.SCRIPT.replace("/dev/termination-log", str(log))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(image), kernel_check.MODE_ENV: mode, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc.returncode, printed, json.loads(log.read_text())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real tiny extension module per LMCache name: ``PyInit_<name>`` is the entry point
    the loader looks up, so each only loads under the module name the release imports."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build a fake lmcache extension")
    build = tmp_path_factory.mktemp("ext")
    include = sysconfig.get_paths()["include"]
    out: dict[str, str] = {}
    for name in ("c_ops", "cuda_ops"):
        source = build / f"{name}.c"
        source.write_text(
            "#include <Python.h>\n"
            f'static struct PyModuleDef m = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};\n'
            f"PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&m); }}\n"
        )
        built = build / f"{name}.so"
        subprocess.run(
            [gcc, "-shared", "-fPIC", f"-I{include}", str(source), "-o", str(built)], check=True
        )
        out[name] = str(built)
    return out


@pytest.mark.services
@pytest.mark.parametrize(
    "name",
    ["c_ops", "cuda_ops"],
    ids=["lmcache-0.4-c_ops", "lmcache-0.5-cuda_ops"],
)
def test_detector_ok_when_the_extension_loads(
    tmp_path: Path, compiled: dict[str, str], name: str
) -> None:
    """LMCache <= 0.4.x ships lmcache/c_ops*.so (``import lmcache`` imports lmcache.c_ops);
    >= 0.5 ships lmcache/cuda_ops*.so (``CudaDeviceOps.ensure_native`` imports
    lmcache.cuda_ops). Either layout loads, and the verdict names the module loaded."""
    (tmp_path / "img").mkdir()
    image = _fake_image(tmp_path / "img", extensions={name: compiled[name]})
    code, printed, verdict = _run(tmp_path, image, "strict")
    assert code == 0
    assert verdict == printed
    assert verdict == {
        "mode": "strict",
        "result": "ok",
        "error": "",
        "extension": f"lmcache.{name}",
        "versions": {},
    }


@pytest.mark.services
def test_detector_reports_installed_versions_from_package_metadata(
    tmp_path: Path, compiled: dict[str, str]
) -> None:
    """The verdict carries the lmcache, vllm and torch releases the image has installed,
    read from their dist-info metadata (nothing imported for it)."""
    (tmp_path / "img").mkdir()
    installed = {"lmcache": "0.4.7", "vllm": "0.11.0", "torch": "2.8.0+cu128"}
    image = _fake_image(
        tmp_path / "img", extensions={"c_ops": compiled["c_ops"]}, installed=installed
    )
    code, printed, verdict = _run(tmp_path, image, "report-only")
    assert code == 0
    assert printed == verdict
    assert verdict["result"] == "ok"
    assert verdict["versions"] == installed


@pytest.mark.services
def test_detector_reports_a_package_not_installed_as_absent(
    tmp_path: Path, compiled: dict[str, str]
) -> None:
    """A client the engine pip-installs at start is not in the image when the check runs:
    absent from ``versions``, never guessed (here the package directory is importable
    but carries no metadata, as a vendored or copied-in tree would)."""
    (tmp_path / "img").mkdir()
    image = _fake_image(
        tmp_path / "img",
        extensions={"cuda_ops": compiled["cuda_ops"]},
        installed={"vllm": "0.33.0", "torch": "2.9.0"},
    )
    _, _, verdict = _run(tmp_path, image, "strict")
    assert verdict["result"] == "ok"
    assert verdict["versions"] == {"vllm": "0.33.0", "torch": "2.9.0"}


@pytest.mark.services
def test_detector_reports_versions_on_a_failed_check(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    image = _fake_image(tmp_path / "img", installed={"lmcache": "0.5.6"})
    code, _, verdict = _run(tmp_path, image, "strict")
    assert code == 1
    assert verdict["result"] == "failed"
    assert verdict["versions"] == {"lmcache": "0.5.6"}


@pytest.mark.services
@pytest.mark.parametrize(
    ("release", "loaded"), [("0.4.7", "c_ops"), ("0.5.6", "cuda_ops"), (None, "cuda_ops")]
)
def test_detector_loads_the_name_the_installed_release_imports(
    tmp_path: Path, compiled: dict[str, str], release: str | None, loaded: str
) -> None:
    """With both files present (a tree where a build left the other one), the check loads
    the name the installed release imports: c_ops below 0.5, cuda_ops from 0.5; with no
    metadata, cuda_ops first."""
    (tmp_path / "img").mkdir()
    image = _fake_image(
        tmp_path / "img",
        extensions=dict(compiled),
        installed={"lmcache": release} if release else None,
    )
    _, _, verdict = _run(tmp_path, image, "strict")
    assert verdict["result"] == "ok"
    assert verdict["extension"] == f"lmcache.{loaded}"


@pytest.mark.services
def test_detector_loads_each_name_under_its_own_module_name(
    tmp_path: Path, compiled: dict[str, str]
) -> None:
    """The module name selects the PyInit_<name> entry point: a c_ops object shipped as
    cuda_ops*.so does not load, so a check that used one name for both files would fail."""
    (tmp_path / "img").mkdir()
    image = _fake_image(tmp_path / "img", extensions={"cuda_ops": compiled["c_ops"]})
    code, _, verdict = _run(tmp_path, image, "strict")
    assert code == 1
    assert verdict["extension"] == "lmcache.cuda_ops"
    assert verdict["error"].startswith("ImportError")


@pytest.mark.parametrize(("mode", "exit_code"), [("report-only", 0), ("strict", 1)])
@pytest.mark.services
def test_detector_no_compiled_extension(tmp_path: Path, mode: str, exit_code: int) -> None:
    (tmp_path / "img").mkdir()
    image = _fake_image(tmp_path / "img")
    code, _, verdict = _run(tmp_path, image, mode)
    assert code == exit_code
    assert verdict["mode"] == mode
    assert verdict["result"] == "failed"
    assert "cuda_ops*.so" in verdict["error"]
    assert "c_ops*.so" in verdict["error"]
    assert "extension" not in verdict


@pytest.mark.services
@pytest.mark.parametrize("name", ["c_ops", "cuda_ops"])
@pytest.mark.parametrize(("mode", "exit_code"), [("report-only", 0), ("strict", 1)])
def test_detector_extension_that_fails_to_load(
    tmp_path: Path, mode: str, exit_code: int, name: str
) -> None:
    (tmp_path / "img").mkdir()
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not an ELF object")
    image = _fake_image(tmp_path / "img", extensions={name: str(broken)})
    code, _, verdict = _run(tmp_path, image, mode)
    assert code == exit_code
    assert verdict["result"] == "failed"
    assert verdict["error"].startswith("ImportError")
    assert verdict["extension"] == f"lmcache.{name}"


@pytest.mark.services
def test_detector_lmcache_not_importable(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    image = _fake_image(tmp_path / "img", lmcache=False)
    code, _, verdict = _run(tmp_path, image, "report-only")
    assert code == 0
    assert "lmcache is not importable" in verdict["error"]


@pytest.mark.services
def test_detector_torch_missing_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    image = _fake_image(tmp_path / "img", torch=False)
    code, _, verdict = _run(tmp_path, image, "strict")
    assert code == 1
    assert "torch" in verdict["error"]


GPU_ENGINE_RESOURCES = {
    "requests": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "10Gi", "nvidia.com/gpu": "1"},
    "limits": {
        "cpu": "8",
        "memory": "32Gi",
        "ephemeral-storage": "20Gi",
        "nvidia.com/gpu": "1",
        "hugepages-2Mi": "1Gi",
    },
}


@pytest.mark.parametrize(
    ("engine_resources", "expected"),
    [
        (None, {"requests": {"cpu": "10m", "memory": "64Mi"}}),
        (
            GPU_ENGINE_RESOURCES,
            {
                "requests": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "10Gi"},
                "limits": {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "20Gi"},
            },
        ),
        (
            {"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}},
            {"limits": {"cpu": "2", "memory": "8Gi"}},
        ),
        (
            {"requests": {"memory": "2Gi"}},
            {"requests": {"memory": "2Gi", "cpu": "10m"}},
        ),
        ({"limits": {"nvidia.com/gpu": "1"}}, {"requests": {"cpu": "10m", "memory": "64Mi"}}),
    ],
    ids=["none", "gpu-requests-and-limits", "limits-only", "memory-request-only", "gpu-only"],
)
def test_check_resources_are_the_engines_cpu_memory_and_ephemeral_storage(
    engine_resources: Any, expected: dict[str, Any]
) -> None:
    """Rule check_resources: the check gets the cpu, memory and ephemeral-storage
    requests and limits of the engine container it checks and none of its extended
    resources (nor hugepages); a small request for cpu or memory the engine declares
    neither request nor limit for. The pod's effective resources (the larger of the
    largest init container and the sum of the app containers) are then unchanged."""
    engine = make_container(image="vllm/vllm-openai:v0.11.0")
    if engine_resources is not None:
        engine["resources"] = engine_resources
    check = check_of(wire("strict", engine))
    assert check is not None
    assert check["resources"] == expected
    assert check["resources"] is not engine.get("resources")
