"""Run the test control plane outside pytest: ``make cluster-up`` / ``cluster-down``.

    python -m tests.harness.cli up      # start detached, print `export KUBECONFIG=...`
    python -m tests.harness.cli status  # print whether it runs
    python -m tests.harness.cli down    # stop it and remove the state dir

``up`` starts a detached supervisor (``serve``) that owns the
:class:`~tests.harness.controlplane.ControlPlane` and writes ``state.json`` once it is
ready. By default that includes kube-controller-manager, kube-scheduler and kwok with
its fake GPU and CPU nodes, so Deployments roll out and pods turn Ready;
``--no-controllers`` starts etcd and kube-apiserver only (the default-ServiceAccount
stand-in runs then).
State, certificates, etcd data, the kubeconfig and logs live in ``./.cluster/``
(``--dir`` to change; gitignored).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.harness.controlplane import REPO_ROOT, ControlPlane, ControlPlaneError, tail, wait_until

DEFAULT_DIR = Path(".cluster")
STATE_FILE = "state.json"
SUPERVISOR_LOG = "supervisor.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((state_dir / STATE_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data


def _running(state: dict[str, Any] | None) -> bool:
    return state is not None and all(_alive(int(p)) for p in state["pids"].values())


def serve(state_dir: Path, controllers: bool = True) -> int:
    """Run the control plane in the foreground until SIGTERM/SIGINT."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cp = ControlPlane(work_dir=state_dir, controllers=controllers)
    try:
        cp.start()
        state = {
            "pids": {"supervisor": os.getpid(), **cp.pids},
            "kubeconfig": str(cp.kubeconfig_path),
            "server": cp.server_url,
            "audit_log": str(cp.audit_log_path),
        }
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(state_dir / STATE_FILE)
        print(f"control plane ready at {cp.server_url}", flush=True)
        while not stop.wait(1.0):
            if not cp.running:
                print("a control-plane process exited; stopping", flush=True)
                return 1
        return 0
    finally:
        cp.stop()
        (state_dir / STATE_FILE).unlink(missing_ok=True)


def up(state_dir: Path, timeout: float, controllers: bool = True) -> int:
    state = _read_state(state_dir)
    if _running(state):
        assert state is not None
        print(f"export KUBECONFIG={state['kubeconfig']}")
        return 0
    if state is not None:  # left over from a crash
        _kill_all(state)
        shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / SUPERVISOR_LOG
    with log_path.open("ab") as log:
        flags = [] if controllers else ["--no-controllers"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.cli", "--dir", str(state_dir), *flags, "serve"],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the shell that ran `make cluster-up`
        )

    def died() -> str | None:
        return None if proc.poll() is None else f"supervisor exited with code {proc.returncode}"

    try:
        wait_until(
            lambda: _running(_read_state(state_dir)),
            timeout=timeout,
            interval=0.2,
            description="the control plane",
            abort=died,
        )
    except (ControlPlaneError, TimeoutError) as exc:
        print(
            f"cluster-up failed: {exc}\n----- {log_path} -----\n{tail(log_path, 200)}",
            file=sys.stderr,
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        return 1
    state = _read_state(state_dir)
    assert state is not None
    print(f"# control plane at {state['server']}; logs in {state_dir}", file=sys.stderr)
    print(f"export KUBECONFIG={state['kubeconfig']}")
    return 0


def _kill_all(state: dict[str, Any]) -> None:
    for pid in state["pids"].values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGKILL)


def down(state_dir: Path, timeout: float) -> int:
    state = _read_state(state_dir)
    if state is None:
        print(f"no control plane recorded in {state_dir}")
        shutil.rmtree(state_dir, ignore_errors=True)
        return 0
    supervisor = int(state["pids"]["supervisor"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(supervisor, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(int(p)) for p in state["pids"].values()):
        time.sleep(0.1)
    _kill_all(state)  # whatever did not exit in time
    shutil.rmtree(state_dir, ignore_errors=True)
    print("control plane stopped")
    return 0


def status(state_dir: Path) -> int:
    state = _read_state(state_dir)
    if _running(state):
        assert state is not None
        print(f"running at {state['server']}; export KUBECONFIG={state['kubeconfig']}")
        return 0
    print("not running")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.cli", description="Run the test control plane outside pytest."
    )
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="state dir (default ./.cluster)"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait (includes a first build)"
    )
    parser.add_argument(
        "--no-controllers",
        action="store_true",
        help="etcd and kube-apiserver only: no controller-manager, scheduler or kwok nodes",
    )
    parser.add_argument("command", choices=["up", "down", "status", "serve"])
    args = parser.parse_args(argv)
    state_dir: Path = args.dir.resolve()
    controllers = not args.no_controllers
    if args.command == "up":
        return up(state_dir, args.timeout, controllers)
    if args.command == "down":
        return down(state_dir, min(args.timeout, 30.0))
    if args.command == "status":
        return status(state_dir)
    return serve(state_dir, controllers)


if __name__ == "__main__":
    sys.exit(main())
