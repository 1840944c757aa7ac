"""``make images-test``: build both images from a clean checkout and run them for real.

    python -m tests.images.check [--keep-going]

1. The base: ``tests/images/base-image.sh`` (a python:3.11-slim-bookworm stand-in
   built from Debian's packages, cached), passed as the Dockerfiles' ``BASE_IMAGE``
   build argument. The other build arguments are those of ``make images``
   (``ICACHE_BUILD_COMMIT``, ``ICACHE_BUILD_DATE``); nothing else differs.
2. Both images, built from ``git archive HEAD`` (what a clean clone holds: no venv,
   no caches, no uncommitted edits). Docker's layer cache is kept between runs.
3. The webhook image, run as the Deployment runs it (read-only root filesystem, a
   tmpfs at /tmp, no capabilities, the TLS secret mounted) in embedded mode
   (``--backends-from`` the samples): its HEALTHCHECK turns healthy, it runs as
   65532:65532 and cannot write its root filesystem, ``icache --version`` names the
   commit built, and every replay file of examples/admission/ gets the answer the
   tables in tests/samples.py expect, as the unit tests check in-process (allowed,
   causes, warnings and patch; for Pods the
   decision ``auditAnnotations`` outcome and reason and the annotations the patch
   stamps), under the request's uid; the preStop command of its Deployment
   (``sleep``) runs. The compose shape (plain HTTP) turns healthy too.
4. The worker image: ``icache certs --help``; then ``icache dispatcher`` and
   ``icache worker`` containers on the host network, read-only, against the test
   control plane with real controllers (tests/harness) and a real Redis, converge a
   CacheBackend whose Deployment really rolls out; the worker's HEALTHCHECK turns
   healthy.
5. Image sizes.

Exit status 0 when every check passed. Each step prints its time.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import datetime as dt
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from icache_install import certs
from kubeio import client as k
from shared import constants as c
from tests.harness.controlplane import ControlPlane, free_port, wait_until
from tests.harness.redis_server import RedisServer
from tests.samples import EXAMPLES_SUBSCRIBER_IMAGE as SUBSCRIBER_IMAGE

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
IMAGE_REPO = "inference-cache-images-test"
UID_GID = "65532:65532"
NO_GATE = {"inferencecache.io/require-kv-events": "false"}
# The Deployments' /tmp: an emptyDir with sizeLimit 64Mi (manifests/base/*-deployment.yaml).
HARDENED = [
    "--read-only",
    "--tmpfs=/tmp:rw,size=64m",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
]
# The image's own HEALTHCHECK command, probed every second instead of every 30s/60s so
# "healthy" shows up in seconds.
FAST_HEALTH = ["--health-interval=1s"]


# --------------------------------------------------------------------------- running


def log(message: str) -> None:
    print(f"==> {message}", flush=True)


def docker(*args: str, check: bool = True, timeout: float = 600) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise CheckFailedError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


class CheckFailedError(AssertionError):
    pass


@dataclass
class Report:
    keep_going: bool
    results: list[tuple[str, bool, float, str]] = field(default_factory=list)

    @contextlib.contextmanager
    def check(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        except (AssertionError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
            seconds = time.monotonic() - start
            self.results.append((name, False, seconds, str(exc)))
            print(f"FAIL {name} ({seconds:.1f}s)\n     {exc}", flush=True)
            if not self.keep_going:
                raise
        else:
            seconds = time.monotonic() - start
            self.results.append((name, True, seconds, ""))
            print(f"ok   {name} ({seconds:.1f}s)", flush=True)

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _, _ in self.results)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailedError(message)


# --------------------------------------------------------------------------- building


def base_image() -> str:
    out = subprocess.run(
        ["bash", str(HERE / "base-image.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        timeout=1200,
    ).stdout
    return out.strip().splitlines()[-1]


def clean_checkout(dest: Path) -> str:
    """``git archive HEAD`` into ``dest``; returns the short commit."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if dirty:
        log(f"uncommitted changes are not in the images (built from {commit})")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def drop_older_builds(image: str) -> None:
    """Remove this test's images of earlier commits (the one just built stays, as the
    next run's layer cache), so a CI machine does not collect one per commit."""
    repository, _, keep = image.rpartition(":")
    tags = docker("images", "--format={{.Tag}}", repository).split()
    old = [f"{repository}:{tag}" for tag in tags if tag != keep]
    if old:
        docker("rmi", *old, check=False)


def build(context: Path, name: str, base: str, tag: str, commit: str) -> None:
    """``docker build`` as ``make images`` runs it (the same build arguments), on
    ``base``."""
    built = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    docker(
        "build",
        "--quiet",
        "--force-rm",  # no container left behind by a failed step
        f"--build-arg=BASE_IMAGE={base}",
        f"--build-arg=ICACHE_BUILD_COMMIT={commit}",
        f"--build-arg=ICACHE_BUILD_DATE={built}",
        f"--file={context / f'Dockerfile.{name}'}",
        f"--tag={tag}",
        str(context),
        timeout=1800,
    )


# --------------------------------------------------------------------------- containers


@contextlib.contextmanager
def container(*args: str) -> Iterator[str]:
    """``docker run -d`` ``args``; removed afterwards (its log printed if asked)."""
    name = f"icache-images-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", f"--name={name}", *args)
    try:
        yield name
    finally:
        if os.environ.get("ICACHE_SHOW_CONTAINER_LOGS"):
            print(docker("logs", name, check=False))
        docker("rm", "-f", name, check=False)


def state(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(docker("inspect", "--format={{json .State}}", name))
    return data


def wait_healthy(name: str, timeout: float = 90.0) -> None:
    def healthy() -> bool:
        st = state(name)
        if not st.get("Running"):
            logs = docker("logs", "--tail=40", name, check=False)
            raise CheckFailedError(f"{name} exited {st.get('ExitCode')}:\n{logs}")
        return bool((st.get("Health") or {}).get("Status") == "healthy")

    try:
        wait_until(healthy, timeout=timeout, interval=0.5, description=f"{name} healthy")
    except TimeoutError as exc:
        health = state(name).get("Health") or {}
        raise CheckFailedError(f"{exc}; last probes: {health.get('Log', [])[-2:]}") from exc


def process_ids(name: str) -> str:
    return docker(
        "exec", name, "python", "-c", "import os; print(f'{os.getuid()}:{os.getgid()}')"
    ).strip()


def root_filesystem_read_only(name: str) -> bool:
    """A write into the image's own files fails with EROFS."""
    probe = (
        "import errno, sys\n"
        "try:\n    open('/opt/venv/.write-probe', 'w')\n"
        "except OSError as e:\n    sys.exit(0 if e.errno == errno.EROFS else 2)\n"
        "sys.exit(1)\n"
    )
    done = subprocess.run(
        ["docker", "exec", name, "python", "-c", probe], capture_output=True, check=False
    )
    return done.returncode == 0


# --------------------------------------------------------------------------- webhook


def post(url: str, body: bytes, ctx: ssl.SSLContext | None) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def answer(url: str, body: bytes, ctx: ssl.SSLContext | None, what: str) -> dict[str, Any]:
    """The AdmissionReview response to ``body``; its uid must be the request's."""
    response: dict[str, Any] = post(url, body, ctx)["response"]
    uid = json.loads(body)["request"]["uid"]
    expect(response.get("uid") == uid, f"{what}: response uid {response.get('uid')!r} != {uid!r}")
    return response


def patched(request_body: bytes, response: dict[str, Any]) -> dict[str, Any]:
    """The request's object with the response's JSONPatch applied."""
    obj: dict[str, Any] = json.loads(request_body)["request"]["object"]
    if not response.get("patch"):
        return obj
    ops = json.loads(base64.b64decode(response["patch"]))
    out: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    return out


def check_admission_examples(base_url: str, ctx: ssl.SSLContext | None) -> int:
    """Every replay file, through the container, against tests/samples.py's tables
    (the webhook runs with their kvevent-subscriber image)."""
    from tests.samples import EXAMPLES_DIR as EXAMPLES
    from tests.samples import EXPECTED_CACHEBACKEND_EXAMPLES as EXPECTED_EXAMPLES
    from tests.samples import EXPECTED_POD_EXAMPLES as POD_EXPECTED

    count = 0
    for name, (allowed, causes, patch_expected, warned) in sorted(EXPECTED_EXAMPLES.items()):
        body = (EXAMPLES / name).read_bytes()
        url = f"{base_url}/validate-inferencecache-io-v1alpha1-cachebackend"
        r = answer(url, body, ctx, f"validate {name}")
        got = (
            r["allowed"],
            len((r.get("status") or {}).get("details", {}).get("causes", [])),
            len(r.get("warnings") or []),
        )
        expect(
            got == (allowed, causes, warned),
            f"validate {name}: {got} != {(allowed, causes, warned)}",
        )
        url = f"{base_url}/mutate-inferencecache-io-v1alpha1-cachebackend"
        m = answer(url, body, ctx, f"mutate {name}")
        expect(m["allowed"] is True and ("patch" in m) is patch_expected, f"mutate {name}: {m}")
        count += 2
    for name, (outcome, reason, backend) in sorted(POD_EXPECTED.items()):
        body = (EXAMPLES / name).read_bytes()
        r = answer(f"{base_url}/mutate--v1-pod", body, ctx, f"pod {name}")
        expect(r["allowed"] is True, f"pod {name}: not allowed: {r}")
        decision = r.get("auditAnnotations") or {}
        expect(
            (decision.get("outcome"), decision.get("reason")) == (outcome, reason),
            f"pod {name}: decision {decision} != outcome {outcome}, reason {reason}",
        )
        annotations = (patched(body, r).get("metadata") or {}).get("annotations") or {}
        stamped = annotations.get(c.ANNOTATION_INJECTED_BY)
        expect(stamped == backend, f"pod {name}: injected-by {stamped!r} != {backend!r}")
        skipped = annotations.get(c.ANNOTATION_INJECT_SKIPPED)
        want_skipped = c.INJECT_SKIPPED_VALUE if outcome == "skipped" else None
        expect(skipped == want_skipped, f"pod {name}: inject-skipped {skipped!r}")
        count += 1
    return count


def tls_dir(work: Path) -> tuple[Path, bytes]:
    """A serving certificate for 127.0.0.1, readable by the image's user."""
    now = dt.datetime.now(dt.UTC)
    ca = certs.new_ca(now)
    serving = certs.issue_serving(ca, ["127.0.0.1", "localhost"], now)
    out = work / "tls"
    out.mkdir(mode=0o755)
    (out / "tls.crt").write_bytes(serving.cert_pem)
    (out / "tls.key").write_bytes(serving.key_pem)
    (out / "tls.key").chmod(0o644)  # a throwaway key, mounted read-only
    return out, ca.cert_pem


def webhook_checks(report: Report, image: str, work: Path) -> None:
    tls, ca_pem = tls_dir(work)
    samples = REPO / "manifests" / "samples"
    port = free_port()
    with container(
        *HARDENED,
        *FAST_HEALTH,
        f"--publish=127.0.0.1:{port}:8443",
        f"--volume={tls}:/etc/inference-cache/tls:ro",
        f"--volume={samples}:/samples:ro",
        image,
        "webhook", "--host=0.0.0.0", "--port=8443",
        "--tls-cert-file=/etc/inference-cache/tls/tls.crt",
        "--tls-key-file=/etc/inference-cache/tls/tls.key",
        "--backends-from=/samples", f"--kvevent-subscriber-image={SUBSCRIBER_IMAGE}",
    ) as name:  # fmt: skip
        with report.check("webhook: HEALTHCHECK healthy (TLS, read-only root, tmpfs /tmp)"):
            wait_healthy(name)
        with report.check(f"webhook: runs as {UID_GID}, root filesystem not writable"):
            expect(docker("inspect", "--format={{.Config.User}}", image).strip() == UID_GID,
                   "image USER")  # fmt: skip
            ids = process_ids(name)
            expect(ids == UID_GID, f"process ids {ids}")
            expect(root_filesystem_read_only(name), "a write under /opt/venv did not get EROFS")
        with report.check("webhook: the Deployment's preStop command runs (sleep 0)"):
            docker("exec", name, "sleep", "0")
        with report.check("webhook: icache --version names the commit built"):
            commit = image.rpartition(":")[2]
            version = docker("exec", name, "icache", "--version").strip()
            expect(f"(commit {commit}, built 20" in version, version)
        with report.check("webhook: examples/admission answered as the unit tests expect"):
            ctx = ssl.create_default_context(cadata=ca_pem.decode())
            count = check_admission_examples(f"https://127.0.0.1:{port}", ctx)
            print(f"     {count} reviews", flush=True)
    port = free_port()
    compose_shape = container(
        *HARDENED,
        *FAST_HEALTH,
        f"--publish=127.0.0.1:{port}:8443",
        f"--volume={samples}:/samples:ro",
        image,
        "webhook", "--insecure", "--host=0.0.0.0", "--port=8443", "--backends-from=/samples",
    )  # fmt: skip
    with (
        compose_shape as name,
        report.check("webhook: HEALTHCHECK healthy in the compose shape (plain HTTP)"),
    ):
        wait_healthy(name)
        body = (REPO / "examples/admission/create-invalid-aggregated.json").read_bytes()
        r = post(f"http://127.0.0.1:{port}/validate-inferencecache-io-v1alpha1-cachebackend",
                 body, None)["response"]  # fmt: skip
        expect(r["allowed"] is False, f"create-invalid-aggregated allowed: {r}")


# --------------------------------------------------------------------------- worker


def worker_checks(report: Report, image: str, work: Path) -> None:
    with report.check("worker: icache certs --help"):
        out = docker("run", "--rm", *HARDENED, image, "certs", "--help")
        expect("usage:" in out and "certs" in out, out[:400])
        ids = docker("run", "--rm", "--entrypoint=id", image, "-u").strip()
        expect(ids == UID_GID.split(":")[0], f"worker image uid {ids}")

    from tests.e2e.conftest import Proc, Stack, condition, install_cluster

    class ContainerStack(Stack):
        """The e2e Stack, with `icache dispatcher` / `icache worker` in containers."""

        def _spawn(self, name: str, args: list[str]) -> Proc:
            log_path = self.workdir / f"{name}.log"
            kubeconfigs = self.cluster.worker_kubeconfig.parent
            # Mounted at /kube: the host path (under /root) is not traversable by 65532.
            args = [a.replace(str(kubeconfigs), "/kube") for a in args]
            container_name = f"icache-images-test-{name}-{self.tag}"
            containers.append(container_name)
            with log_path.open("ab") as fh:
                popen = subprocess.Popen(
                    ["docker", "run", "--rm", f"--name={container_name}", "--network=host",
                     *HARDENED, *FAST_HEALTH, f"--volume={kubeconfigs}:/kube:ro",
                     "--env=ICACHE_DEBUG_LOGGERS=reconciler.trace", image, *args],
                    stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )  # fmt: skip
            proc = Proc(name, popen, log_path)
            self.procs.append(proc)
            return proc

    containers: list[str] = []
    cp = ControlPlane(controllers=True)
    redis_server = RedisServer()
    stack: Stack | None = None
    try:
        with report.check("worker: test control plane (controllers, kwok) and Redis up"):
            cp.start()
            redis_server.start()
        kube_dir = work / "kubeconfigs"
        cluster = install_cluster(cp, kube_dir)
        kube_dir.chmod(0o755)
        for path in kube_dir.iterdir():
            path.chmod(0o644)  # throwaway client certificates, mounted read-only
        stack = ContainerStack(cluster, redis_server, work, db=1)
        with report.check("worker: dispatcher and worker containers converge a CacheBackend"):
            dispatcher = stack.start_dispatcher()
            worker = stack.start_worker()
            ns = cluster.namespace()
            spec = {
                "runtime": "VLLM",
                "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
            }
            cluster.create_cb(ns, "cb", spec, NO_GATE)
            obj = cluster.wait_condition(ns, "cb", "Ready", "True", "BackendReady", timeout=120)
            dep = cluster.kube.get(k.DEPLOYMENTS, ns, "cb-lmcache-server")
            expect((dep.get("status") or {}).get("availableReplicas") == 1, f"{dep.get('status')}")
            expect(
                obj["status"]["observedGeneration"] == obj["metadata"]["generation"], "generation"
            )
            expect(condition(obj, "Progressing") == ("False", "Synced"), f"{obj['status']}")
            expect(stack.lease_holder() == stack.identity(dispatcher.name), "lease holder")
            expect(dispatcher.alive and worker.alive, stack.logs())
        with report.check("worker: HEALTHCHECK healthy, runs as 65532:65532, read-only root"):
            name = f"icache-images-test-worker-{stack.tag}"
            wait_healthy(name)
            ids = process_ids(name)
            expect(ids == UID_GID, f"process ids {ids}")
            expect(root_filesystem_read_only(name), "a write under /opt/venv did not get EROFS")
    finally:
        if stack is not None:
            if not report.passed:
                print(stack.logs()[-8000:])
            stack.stop()
        for name in containers:
            docker("rm", "-f", name, check=False)
        redis_server.stop()
        cp.stop()


# --------------------------------------------------------------------------- main


def sizes(images: dict[str, str]) -> None:
    for label, image in images.items():
        size = int(docker("image", "inspect", "--format={{.Size}}", image).strip())
        print(f"     {label:<8} {image:<60} {size / 1e6:7.1f} MB", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.images.check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "--keep-going", action="store_true", help="run every check even after a failure"
    )
    args = parser.parse_args(argv)
    report = Report(keep_going=args.keep_going)
    start = time.monotonic()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inference-cache"
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="images-test-", dir=cache))
    try:
        with report.check("base image (Debian bookworm python3.11, cached)"):
            base = base_image()
            print(f"     {base}", flush=True)
        context = work / "context"
        context.mkdir()
        images: dict[str, str] = {"base": base}
        with report.check("build both images from a clean checkout"):
            commit = clean_checkout(context)
            for name in ("webhook", "worker"):
                t = time.monotonic()
                images[name] = f"{IMAGE_REPO}/{name}:{commit}"
                build(context, name, base, images[name], commit)
                drop_older_builds(images[name])
                print(f"     {name}: {time.monotonic() - t:.1f}s", flush=True)
        steps: list[Callable[[Report, str, Path], None]] = [webhook_checks, worker_checks]
        for step, name in zip(steps, ("webhook", "worker"), strict=True):
            step(report, images[name], work)
        log("image sizes")
        sizes(images)
    except (AssertionError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
        if not report.results or report.results[-1][1]:
            print(f"FAIL {exc}", flush=True)
            report.results.append(("setup", False, 0.0, str(exc)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = [name for name, ok, _, _ in report.results if not ok]
    log(f"images-test: {len(report.results) - len(failed)} passed, {len(failed)} failed "
        f"in {time.monotonic() - start:.0f}s")  # fmt: skip
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
