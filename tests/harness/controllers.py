"""kube-controller-manager, kube-scheduler and kwok next to the harness's API server.

With these three the control plane behaves like a cluster whose kubelets never
run a container: Deployments get ReplicaSets and Pods, Pods are scheduled onto
fake nodes and turn Running and Ready, a deleted pod is replaced, the garbage
collector and the namespace controller clean up, the HPA controller writes the
scale. :class:`ClusterControllers` runs them for a started
:class:`~tests.harness.controlplane.ControlPlane` (``ControlPlane(controllers=True)``
does it for you).

Identities, as kubeadm sets a cluster up:

* kube-controller-manager authenticates as ``system:kube-controller-manager`` and
  runs each controller with its own ServiceAccount token
  (``--use-service-account-credentials``), so audit events name
  ``system:serviceaccount:kube-system:deployment-controller`` and so on;
* kube-scheduler as ``system:kube-scheduler``;
* kwok as :data:`KWOK_USER` in ``system:masters`` (it writes node and pod status
  and node leases, as every kubelet together would).

The bootstrap RBAC policy of the API server grants the first two what they need.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import kwok
from tests.harness.controlplane import (
    ControlPlane,
    ControlPlaneError,
    free_port,
    spawn_in_own_group,
    terminate_process_group,
    wait_until,
)

CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
KWOK_USER = "icache-harness:kwok"

#: How often the HPA controller looks at its HPAs (default 15s; tests wait on it).
HPA_SYNC_PERIOD = "2s"


@dataclass(frozen=True)
class ControllerBinaries:
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path

    @classmethod
    def beside(cls, bin_dir: Path) -> ControllerBinaries:
        """The layout build.sh writes: ``<cache>/bin/*`` and ``<cache>/kwok-stages/``."""
        return cls(
            kube_controller_manager=bin_dir / "kube-controller-manager",
            kube_scheduler=bin_dir / "kube-scheduler",
            kwok=bin_dir / "kwok",
            kwok_stages=bin_dir.parent / "kwok-stages",
        )

    def missing(self) -> list[Path]:
        paths = [self.kube_controller_manager, self.kube_scheduler, self.kwok]
        out = [p for p in paths if not p.is_file()]
        out += [
            self.kwok_stages / name
            for name in kwok.DEFAULT_STAGE_FILES
            if not (self.kwok_stages / name).is_file()
        ]
        return out


def _insecure_context() -> ssl.SSLContext:
    # The components' self-signed serving certificates: only /healthz is read.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _healthy(port: int) -> bool:
    url = f"https://127.0.0.1:{port}/healthz"
    with urllib.request.urlopen(url, context=_insecure_context(), timeout=3) as resp:
        return bool(resp.status == 200)


class ClusterControllers:
    """The three processes, their kubeconfigs and the fake nodes, for one control plane."""

    def __init__(
        self,
        control_plane: ControlPlane,
        binaries: ControllerBinaries,
        *,
        nodes: Sequence[kwok.FakeNode] = kwok.DEFAULT_NODES,
        timeout: float = 120.0,
    ) -> None:
        self._cp = control_plane
        self._binaries = binaries
        self.nodes = tuple(nodes)
        self._timeout = timeout
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ports: dict[str, int] = {}

    # -- paths ------------------------------------------------------------- #

    @property
    def _dir(self) -> Path:
        return self._cp.work_dir / "controllers"

    def log_path(self, name: str) -> Path:
        return self._cp.work_dir / f"{name}.log"

    @property
    def log_paths(self) -> list[Path]:
        return [
            self.log_path(name) for name in ("kube-controller-manager", "kube-scheduler", "kwok")
        ]

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._procs.items()}

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs.values())

    def process_died(self) -> str | None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                return f"{name} exited with code {proc.returncode}"
        return None

    # -- lifecycle ---------------------------------------------------------- #

    def start(self) -> None:
        missing = self._binaries.missing()
        if missing:
            raise ControlPlaneError(
                f"controller binaries missing: {', '.join(map(str, missing))}; "
                "run `make controlplane` (tests/controlplane/build.sh)"
            )
        self._dir.mkdir(exist_ok=True)
        pki = self._cp.work_dir / "pki"
        kcm_port, scheduler_port = free_port(), free_port()
        self._ports = {"kube-controller-manager": kcm_port, "kube-scheduler": scheduler_port}

        self._spawn(
            "kube-controller-manager",
            [
                str(self._binaries.kube_controller_manager),
                f"--kubeconfig={self._kubeconfig('kube-controller-manager', CONTROLLER_MANAGER_USER)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self._dir / 'kube-controller-manager-certs'}",
                f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self._binaries.kube_scheduler),
                f"--kubeconfig={self._kubeconfig('kube-scheduler', SCHEDULER_USER)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                f"--cert-dir={self._dir / 'kube-scheduler-certs'}",
                "--profiling=false",
                "--v=1",
            ],
        )
        config = kwok.write_config(self._dir / "kwok.yaml", self._binaries.kwok_stages)
        self._spawn(
            "kwok",
            [
                str(self._binaries.kwok),
                f"--kubeconfig={self._kubeconfig('kwok', KWOK_USER, ['system:masters'])}",
                f"--config={config}",
            ],
        )
        for name, port in self._ports.items():
            wait_until(
                lambda port=port: _healthy(port),  # type: ignore[misc]
                timeout=self._timeout,
                interval=0.25,
                description=f"{name} /healthz on port {port}",
                abort=self.process_died,
            )
        self._create_nodes()
        wait_until(
            self._nodes_ready,
            timeout=self._timeout,
            interval=0.25,
            description=f"kwok nodes {[n.name for n in self.nodes]} Ready",
            abort=self.process_died,
        )
        # The ServiceAccount controller has run once the default namespace has its
        # account (Pods are admitted only then).
        wait_until(
            lambda: self._cp.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            timeout=self._timeout,
            description="the ServiceAccount controller",
            abort=self.process_died,
        )

    def stop(self) -> None:
        for proc in self._procs.values():
            terminate_process_group(proc)
        self._procs.clear()

    # -- internals ---------------------------------------------------------- #

    def _kubeconfig(self, name: str, user: str, groups: Sequence[str] = ()) -> Path:
        keypair = self._cp.client_keypair(user, groups)
        return self._cp.write_kubeconfig(self._dir / f"{name}.kubeconfig", keypair)

    def _spawn(self, name: str, args: list[str]) -> None:
        self._procs[name] = spawn_in_own_group(args, self.log_path(name), self._cp.work_dir)

    def _create_nodes(self) -> None:
        from kubernetes import client

        api = self._cp.api_client()
        try:
            core: Any = client.CoreV1Api(api)  # plain manifests: serialised as the bodies
            for manifest in kwok.node_manifests(self.nodes):
                try:
                    core.create_node(manifest)
                except client.ApiException as exc:
                    if exc.status != 409:
                        raise
        finally:
            api.close()

    def _nodes_ready(self) -> bool:
        status, body = self._cp.get("/api/v1/nodes")
        if status != 200:
            return False
        items: list[dict[str, Any]] = json.loads(body).get("items") or []
        ready = {
            n["metadata"]["name"]
            for n in items
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        }
        return {n.name for n in self.nodes} <= ready
