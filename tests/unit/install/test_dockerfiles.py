"""Dockerfile.webhook and Dockerfile.worker, without a Docker engine.

Statically: pinned base, multi-stage with nothing to compile with at runtime,
non-root numeric USER matching the manifests, `icache` as ENTRYPOINT, a
HEALTHCHECK, no secrets, constraints.txt used, a build context that holds every
COPY source. Dynamically, what can run without Docker: the HEALTHCHECK commands
themselves against a real `icache webhook`, the default CMDs against the CLI's
parsers, and the project wheel the builder stage installs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import importlib
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

from icache_cli.main import SUBCOMMANDS
from icache_install import certs
from icache_install.manifests_cli import render_manifests, split_image
from tests.cli_helpers import paths_unchecked
from tests.harness.controlplane import (
    free_port,
    spawn_in_own_group,
    terminate_process_group,
    wait_until,
)
from tests.samples import ROOT

DOCKERFILES = {
    "webhook": ROOT / "Dockerfile.webhook",
    "worker": ROOT / "Dockerfile.worker",
}
IMAGES = {
    "webhook": "ghcr.io/inference-cache/webhook",
    "worker": "ghcr.io/inference-cache/worker",
}
PACKAGES = (
    "shared",
    "kubeio",
    "cli_support",
    "icache_cli",
    "webhook_svc",
    "reconciler",
    "icache_install",
)
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|make|build-essential|clang|apt-get|apk|pip install)\b")
SECRET_NAMES = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|PRIVATE|CREDENTIAL", re.I)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int
    stage_name: str | None


def parse(path: Path) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    stage, stage_name, pending = -1, None, ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text, pending = pending + line, ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
            match = re.search(r"\bAS\s+(\S+)", args, re.I)
            stage_name = match.group(1) if match else None
        instructions.append(Instruction(keyword, args.strip(), stage, stage_name))
    assert not pending, f"{path}: dangling line continuation"
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    count = max(i.stage for i in instructions) + 1
    return [[i for i in instructions if i.stage == n] for n in range(count)]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), args
    assert all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command(name: str) -> list[str]:
    (check,) = [i for i in parse(DOCKERFILES[name]) if i.keyword == "HEALTHCHECK"]
    _, _, command = check.args.partition("CMD ")
    return exec_form(command.strip())


# Each image's tests run once per Dockerfile; ``final`` reads the parametrized ``image``.
each_image = pytest.mark.parametrize("image", sorted(DOCKERFILES))


@pytest.fixture
def final(image: str) -> list[Instruction]:
    return stages(parse(DOCKERFILES[image]))[-1]


# --------------------------------------------------------------------------- static


def global_args(path: Path) -> dict[str, str]:
    """The ``ARG name=default`` lines before the first FROM (the only ones a FROM sees)."""
    args: dict[str, str] = {}
    for instruction in parse(path):
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.args.partition("=")
            args[name] = default
    return args


@each_image
def test_multi_stage_on_one_exactly_pinned_base(image: str) -> None:
    """The base is a build ARG (``make images-test`` swaps in a local stand-in);
    its default is the official image, exactly pinned, so a plain `docker build`
    builds what it always did."""
    path = DOCKERFILES[image]
    froms = [i.args.split()[0] for i in parse(path) if i.keyword == "FROM"]
    assert len(froms) >= 2
    # The venv is copied between stages: both must be the same interpreter.
    assert set(froms) == {"${BASE_IMAGE}"}
    base = global_args(path)["BASE_IMAGE"]
    name, tag, digest = split_image(base)
    assert name == "python"
    assert digest or (tag and re.fullmatch(r"\d+\.\d+\.\d+-slim-[a-z]+", tag)), base


@each_image
def test_builder_installs_the_project_with_constraints(image: str) -> None:
    builder = stages(parse(DOCKERFILES[image]))[0]
    copies = [i.args for i in builder if i.keyword == "COPY"]
    assert any("constraints.txt" in c for c in copies)
    installs = [i.args for i in builder if i.keyword == "RUN" and "pip install" in i.args]
    assert any(re.search(r"pip install -c constraints\.txt \.(\s|$)", run) for run in installs)


def test_install_tooling_ships_in_the_worker_image_only() -> None:
    """The installers are out of the core; the webhook image runs
    only the webhook, the worker image also carries `icache certs/manifests`."""
    copied = {
        image: {i.args.split()[0] for i in parse(path) if i.keyword == "COPY"}
        for image, path in DOCKERFILES.items()
    }
    assert "icache_install" in copied["worker"]
    assert "manifests" in copied["worker"]
    assert "icache_install" not in copied["webhook"]
    assert "manifests" not in copied["webhook"]


@each_image
def test_runtime_stage_copies_the_venv_and_has_no_build_tools(
    image: str, final: list[Instruction]
) -> None:
    assert any(
        i.keyword == "COPY" and i.args.startswith("--from=") and "/opt/venv" in i.args
        for i in final
    )
    for instruction in final:
        if instruction.keyword == "RUN":
            assert not BUILD_TOOLS.search(instruction.args), instruction.args
    env = " ".join(i.args for i in final if i.keyword == "ENV")
    assert "PATH=/opt/venv/bin:$PATH" in env


@each_image
def test_runs_as_a_numeric_non_root_user_the_manifests_agree_with(
    image: str, final: list[Instruction]
) -> None:
    users = [i.args for i in final if i.keyword == "USER"]
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # Every Deployment running this image asks for the same uid.
    for doc in render_manifests():
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        if any(split_image(c["image"])[0] == IMAGES[image] for c in pod["containers"]):
            assert pod["securityContext"]["runAsUser"] == int(uid)


@each_image
def test_entrypoint_is_icache_and_the_default_command_parses(
    image: str, final: list[Instruction], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths_unchecked(monkeypatch)  # the pod's mounted certificate is not here
    (entrypoint,) = [i.args for i in final if i.keyword == "ENTRYPOINT"]
    assert exec_form(entrypoint) == ["icache"]
    (cmd,) = [i.args for i in final if i.keyword == "CMD"]
    subcommand, *rest = exec_form(cmd)
    assert subcommand == image
    parser = argparse.ArgumentParser()
    importlib.import_module(SUBCOMMANDS[subcommand][0]).add_arguments(parser)
    parser.parse_args(rest)


@each_image
def test_has_a_healthcheck(image: str, final: list[Instruction]) -> None:
    checks = [i.args for i in final if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    assert checks[0] != "NONE"
    assert "--interval=" in checks[0]
    assert "--timeout=" in checks[0]
    assert healthcheck_command(image)[0] == "python"


@each_image
def test_no_secrets_in_the_image_definition(image: str) -> None:
    for instruction in parse(DOCKERFILES[image]):
        if instruction.keyword in ("ENV", "ARG", "LABEL"):
            for key in re.findall(r"([A-Za-z_][A-Za-z0-9_.-]*)=", instruction.args):
                assert not SECRET_NAMES.search(key), instruction.args
        if instruction.keyword == "ADD":
            pytest.fail(f"ADD (remote fetch or archive) is not used: {instruction.args}")
        if instruction.keyword == "COPY":
            assert not re.search(r"\.cluster|kubeconfig|\.key\b|\.env\b", instruction.args)


def _dockerignore_allows(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    allowed = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            allowed = negate
    return allowed


@each_image
def test_build_context_holds_every_copy_source_and_nothing_private(image: str) -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "the build context is an allow-list"
    for instruction in parse(DOCKERFILES[image]):
        if instruction.keyword != "COPY" or instruction.args.startswith("--from="):
            continue
        *sources, _ = instruction.args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert _dockerignore_allows(source, patterns), source
    for private in (".git", ".venv", "tests/conftest.py", ".cluster/kubeconfig", "Makefile"):
        assert not _dockerignore_allows(private, patterns), private


def test_webhook_exposes_the_port_the_deployment_uses() -> None:
    final = stages(parse(DOCKERFILES["webhook"]))[-1]
    (expose,) = [i.args for i in final if i.keyword == "EXPOSE"]
    (deployment,) = [
        d
        for d in render_manifests()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "inference-cache-webhook"
    ]
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [int(expose)] == [p["containerPort"] for p in ports]


# --------------------------------------------------------------------------- dynamic


@pytest.fixture
def webhook_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    """A real `icache webhook` on loopback: plain HTTP, or TLS when parametrised so."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "icache_cli.main",
        "webhook",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--backends-from={ROOT / 'manifests' / 'samples'}",
    ]
    if getattr(request, "param", "http") == "https":
        now = dt.datetime.now(dt.UTC)
        ca = certs.new_ca(now)
        serving = certs.issue_serving(ca, ["inference-cache-webhook.x.svc"], now)
        (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
        (tmp_path / "tls.key").write_bytes(serving.key_pem)
        args += [
            f"--tls-cert-file={tmp_path / 'tls.crt'}",
            f"--tls-key-file={tmp_path / 'tls.key'}",
        ]
    else:
        args.append("--insecure")
    log = tmp_path / "webhook.log"
    proc = spawn_in_own_group(args, log, ROOT)
    try:
        wait_until(
            lambda: _healthcheck("webhook", port).returncode == 0,
            timeout=30,
            description="webhook healthy",
            abort=lambda: None if proc.poll() is None else log.read_text()[-2000:],
        )
        yield port
    finally:
        terminate_process_group(proc)


def _healthcheck(name: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
    command = healthcheck_command(name)
    env = dict(os.environ)
    if port is not None:
        env["ICACHE_HEALTH_PORT"] = str(port)
    return subprocess.run(
        [sys.executable, *command[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        cwd=ROOT,
    )


@pytest.mark.parametrize("webhook_server", ["http", "https"], indirect=True)
@pytest.mark.services
def test_webhook_healthcheck_passes_against_a_live_webhook(webhook_server: int) -> None:
    """TLS with a certificate that does not name 127.0.0.1 (as in a pod), and plain HTTP."""
    result = _healthcheck("webhook", webhook_server)
    assert result.returncode == 0, result.stderr


@pytest.mark.services
def test_webhook_healthcheck_fails_when_nothing_answers() -> None:
    assert _healthcheck("webhook", free_port()).returncode == 1


@pytest.mark.services
def test_worker_healthcheck_passes_with_the_code_installed() -> None:
    result = _healthcheck("worker")
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The project wheel, built the way the builder stage's `pip install .` builds it."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("inference_cache-*.whl")
    return zipfile.ZipFile(built)


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


@pytest.mark.services
def test_wheel_has_the_icache_entry_point(wheel: zipfile.ZipFile) -> None:
    entry_points = _dist_info(wheel, "entry_points.txt")
    assert re.search(
        r"^\[console_scripts\]\s*\nicache = icache_cli\.main:main\s*$", entry_points, re.M
    )


@pytest.mark.services
def test_wheel_has_every_package_and_every_subcommand(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names
    for module, *_ in SUBCOMMANDS.values():
        assert module.replace(".", "/") + ".py" in names, module
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.services
def test_every_dependency_is_pinned_in_constraints(wheel: zipfile.ZipFile) -> None:
    metadata = Parser().parsestr(_dist_info(wheel, "METADATA"))
    runtime = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    pinned = {
        re.split(r"==", line)[0].strip().lower().replace("_", "-")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    for requirement in runtime:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, requirement


@each_image
def test_compose_and_dockerfiles_agree_on_the_image(image: str) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    for service in compose["services"].values():
        build = service.get("build")
        if build and Path(build["dockerfile"]).name == DOCKERFILES[image].name:
            assert split_image(service["image"])[0] == IMAGES[image]
