"""A real etcd + kube-apiserver on loopback for integration tests.

The binaries come from ``tests/controlplane/build.sh`` (built from the Go module
proxy and cached outside the working tree). :class:`ControlPlane` generates its
own PKI with ``cryptography``, starts both processes in their own process
groups, waits for ``/readyz`` and writes a kubeconfig. Nothing in here depends
on pytest; ``tests/conftest.py`` and ``tests/harness/cli.py`` wrap it.

By default there is no kube-controller-manager, kubelet or scheduler (the
envtest style, for tests that need no controller). What that means for tests:

* The ``ServiceAccount`` admission plugin stays enabled, so Pods are admitted
  exactly as in a real cluster (``serviceAccountName: default`` and the
  ``kube-api-access-*`` projected token volume are added). It rejects Pods in
  namespaces without a ``default`` ServiceAccount, so the control plane runs a
  tiny stand-in for the controller-manager's ServiceAccount controller (a thread
  that creates ``default`` in every namespace). It authenticates as
  :data:`SERVICE_ACCOUNT_CONTROLLER_USER`, so its writes can be filtered out of
  audit counts. Pass ``service_account_admission=False`` to disable both the
  plugin and the thread instead.
* Deleted namespaces stay ``Terminating`` forever (no namespace controller):
  give every test its own namespace name instead of reusing one.
* Deployments never get Pods and Pods never run: set ``status`` yourself.

``ControlPlane(controllers=True)`` also runs kube-controller-manager,
kube-scheduler and kwok with a few fake nodes (:mod:`tests.harness.controllers`,
:mod:`tests.harness.kwok`): workloads roll out for real, Pods are scheduled and
turn Ready, the garbage collector and the namespace controller run, and tests
restart containers or fail pods through kwok stages. The stand-in thread is not
needed there.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from icache_install import certs
from tests.harness.kwok import DEFAULT_NODES, FakeNode

if TYPE_CHECKING:
    from tests.harness.controllers import ClusterControllers

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tests" / "controlplane" / "build.sh"

ADMIN_USER = "icache-admin"
SERVICE_ACCOUNT_CONTROLLER_USER = "icache-harness:serviceaccount-controller"
SYSTEM_MASTERS = "system:masters"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"

#: Audit verbs that change state. ``count_writes`` counts these.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

# One event per request (at ResponseComplete, or Panic), metadata only: enough
# to count who wrote what without logging bodies.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane (or one of its binaries) could not be built or started."""


# --------------------------------------------------------------------------- #
# Small process and polling helpers (also used by redis_server.py)
# --------------------------------------------------------------------------- #


class StartStopContext(ABC):
    """A harness process used as a context manager: ``with Harness() as h`` starts it
    and stops it when the block ends, whether the block raised or not."""

    @abstractmethod
    def start(self) -> Self:
        """Start the process(es) and return once they serve."""

    @abstractmethod
    def stop(self) -> None:
        """Stop what ``start`` started; safe to call repeatedly."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def child_pids(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (read from /proc), sorted."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The field after the parenthesised command name is the state, then ppid.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return sorted(out)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.1,
    description: str = "condition",
    abort: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``check`` until it returns something other than ``None``/``False``.

    ``abort`` is called between polls; a non-empty string aborts with that
    reason (for example "etcd exited with code 1"). Raises ``TimeoutError``
    naming ``description`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
        except Exception as exc:  # the thing polled is not there yet
            last_error = exc
            result = None
        if result is not None and result is not False:
            return result
        if abort is not None:
            reason = abort()
            if reason:
                raise ControlPlaneError(f"gave up waiting for {description}: {reason}")
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {description}{detail}")
        time.sleep(interval)


def terminate_process_group(proc: subprocess.Popen[bytes], *, grace: float = 10.0) -> None:
    """SIGTERM the process group led by ``proc`` then SIGKILL it after ``grace`` s.

    ``proc`` must have been started with ``start_new_session=True``.
    """
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace)
    # Children that outlived the leader (none expected) go too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def spawn_in_own_group(args: Sequence[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``args`` in a new session (so ``killpg`` reaches all of it) with
    stdout/stderr appended to ``log_path``.

    On Linux, when started from the main thread, the child also gets SIGKILL
    if this process dies without cleaning up (pytest killed by CI, SIGTERM
    bypassing atexit), so no etcd/apiserver/redis outlives its test run.
    """
    # PR_SET_PDEATHSIG fires when the spawning *thread* exits; only use it
    # from the main thread, which lives as long as the process.
    linux_main_thread = (
        os.uname().sysname == "Linux" and threading.current_thread() is threading.main_thread()
    )
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(args)}\n".encode())
        log.flush()
        return subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_set_parent_death_signal if linux_main_thread else None,
        )


OWNER_FILE = "owner.pid"


def make_owned_temp_dir(prefix: str) -> Path:
    """A temp dir recording this process as its owner, after removing dirs
    with the same prefix whose owner died without cleaning up (SIGKILL)."""
    root = Path(tempfile.gettempdir())
    for stale in root.glob(f"{prefix}*"):
        try:
            owner = int((stale / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or being created right now
        if owner != os.getpid() and not _pid_alive(owner):
            shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    (path / OWNER_FILE).write_text(str(os.getpid()))
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a log file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<{path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- #
# Binaries
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path


def find_binaries(*, build: bool = True) -> Binaries:
    """Locate etcd and kube-apiserver, building them with build.sh if needed.

    ``ICACHE_CP_BIN_DIR`` points at a directory holding prebuilt binaries and
    skips build.sh entirely. Otherwise build.sh decides the cache directory
    (``ICACHE_CP_CACHE`` overrides it) and builds when the binaries are missing;
    its output streams to stderr so a first-time build is visible.
    """
    override = os.environ.get("ICACHE_CP_BIN_DIR")
    if override:
        bin_dir = Path(override)
    else:
        args = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--print"])
        try:
            out = subprocess.run(
                args, check=True, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
            ).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise ControlPlaneError(f"{BUILD_SCRIPT} failed: {exc}") from exc
        bin_dir = Path(out.strip().splitlines()[-1])
    binaries = Binaries(etcd=bin_dir / "etcd", kube_apiserver=bin_dir / "kube-apiserver")
    for path in (binaries.etcd, binaries.kube_apiserver):
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(
                f"{path} is missing or not executable; run `make controlplane` "
                "(tests/controlplane/build.sh)"
            )
    return binaries


# --------------------------------------------------------------------------- #
# PKI
# --------------------------------------------------------------------------- #


class KeyPair(certs.KeyPair):
    """A certificate and its private key, PEM encoded, that can be written to files
    for the API server's and etcd's flags."""

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.crt`` and ``<stem>.key`` (mode 0600) into ``directory``."""
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


class CertificateAuthority:
    """A throwaway CA that issues serving and client certificates.

    Webhook tests can use one too: issue a serving certificate for
    ``127.0.0.1`` and put :attr:`cert_pem` in the webhook's ``caBundle``.
    """

    def __init__(self, common_name: str = "icache-test-ca", *, valid_days: int = 7) -> None:
        self._valid = dt.timedelta(days=valid_days)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + self._valid)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert(self) -> x509.Certificate:
        return self._cert

    @property
    def cert_pem(self) -> bytes:
        return certs.pem_cert(self._cert)

    @property
    def key_pair(self) -> KeyPair:
        return KeyPair(self.cert_pem, certs.pem_key(self._key))

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: Sequence[x509.GeneralName] = (),
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + self._valid)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(certs.pem_cert(cert), certs.pem_key(key))

    def issue_serving(self, hosts: Iterable[str] = ("127.0.0.1", "localhost")) -> KeyPair:
        """A TLS server certificate valid for ``hosts`` (IP addresses or DNS names)."""
        hosts = list(hosts)
        if not hosts:
            raise ValueError("a serving certificate needs at least one host")
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
        return self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, certs.san_entries(hosts))

    def issue_client(self, user: str, groups: Iterable[str] = ()) -> KeyPair:
        """A client certificate: kube-apiserver reads CN as the user, O as groups."""
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)


def generate_service_account_key() -> tuple[bytes, bytes]:
    """An RSA key pair for signing service-account tokens: (private PEM, public PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return certs.pem_key(key), public


@dataclass(frozen=True)
class ControlPlanePKI:
    """Everything kube-apiserver and its clients need, PEM encoded."""

    ca: CertificateAuthority
    serving: KeyPair
    admin: KeyPair
    service_account_key_pem: bytes
    service_account_pub_pem: bytes

    @classmethod
    def generate(cls, hosts: Iterable[str] = ("127.0.0.1", "localhost")) -> ControlPlanePKI:
        ca = CertificateAuthority("icache-test-kubernetes-ca")
        sa_key, sa_pub = generate_service_account_key()
        return cls(
            ca=ca,
            serving=ca.issue_serving([*hosts, "kubernetes", "kubernetes.default.svc"]),
            admin=ca.issue_client(ADMIN_USER, [SYSTEM_MASTERS]),
            service_account_key_pem=sa_key,
            service_account_pub_pem=sa_pub,
        )


# --------------------------------------------------------------------------- #
# Audit log
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class AuditEvent:
    """One request as the API server's audit log recorded it (Metadata level)."""

    verb: str
    user: str
    groups: tuple[str, ...]
    api_group: str
    api_version: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    stage: str
    uri: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditEvent:
        ref = data.get("objectRef") or {}
        user = data.get("user") or {}
        return cls(
            verb=data.get("verb", ""),
            user=user.get("username", ""),
            groups=tuple(user.get("groups") or ()),
            api_group=ref.get("apiGroup", ""),
            api_version=ref.get("apiVersion", ""),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int((data.get("responseStatus") or {}).get("code", 0)),
            stage=data.get("stage", ""),
            uri=data.get("requestURI", ""),
            raw=data,
        )

    def matches(
        self,
        *,
        verbs: Iterable[str] | None = None,
        user: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        api_group: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> bool:
        """True when every given filter equals this event's field."""
        return (
            (verbs is None or self.verb in set(verbs))
            and (user is None or self.user == user)
            and (resource is None or self.resource == resource)
            and (subresource is None or self.subresource == subresource)
            and (api_group is None or self.api_group == api_group)
            and (namespace is None or self.namespace == namespace)
            and (name is None or self.name == name)
        )


def read_audit_log(path: Path, offset: int = 0) -> tuple[list[AuditEvent], int]:
    """Parse the JSON-lines audit log from byte ``offset``.

    Returns the events and the offset just after the last complete line, so a
    line the server is still writing is picked up by the next call.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = [
        AuditEvent.from_json(json.loads(line)) for line in data[:end].splitlines() if line.strip()
    ]
    return events, offset + end


def audit_log_end(path: Path) -> int:
    """Offset just after the last newline in ``path`` (0 if it does not exist)."""
    try:
        with path.open("rb") as fh:
            pos = fh.seek(0, os.SEEK_END)
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                fh.seek(pos)
                newline = fh.read(step).rfind(b"\n")
                if newline >= 0:
                    return pos + newline + 1
    except FileNotFoundError:
        pass
    return 0


# --------------------------------------------------------------------------- #
# The control plane
# --------------------------------------------------------------------------- #


class ControlPlane(StartStopContext):
    """etcd + kube-apiserver on loopback with generated certificates.

    >>> cp = ControlPlane()
    >>> cp.start()                      # blocks until /readyz answers ok
    >>> api = kubernetes.client.CoreV1Api(cp.api_client())
    >>> cp.stop()                       # also runs at interpreter exit

    ``work_dir`` (default: a fresh temp dir, removed by ``stop()``) holds the
    certificates, etcd data, kubeconfig, audit log and the processes' logs
    (``etcd.log``, ``kube-apiserver.log``). A given ``work_dir`` is kept after
    ``stop()`` unless ``remove_work_dir=True``. ``ICACHE_CP_KEEP=1`` keeps the
    temp dir for debugging.
    """

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        remove_work_dir: bool | None = None,
        audit: bool = True,
        service_account_admission: bool = True,
        extra_apiserver_args: Sequence[str] = (),
        start_timeout: float = 120.0,
        binaries: Binaries | None = None,
        controllers: bool = False,
        nodes: Sequence[FakeNode] = DEFAULT_NODES,
    ) -> None:
        self._requested_work_dir = work_dir
        self._remove_work_dir = remove_work_dir
        self.audit = audit
        self.service_account_admission = service_account_admission
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.start_timeout = start_timeout
        self._binaries = binaries
        self._lock = threading.Lock()
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._work_dir: Path | None = None
        self._pki: ControlPlanePKI | None = None
        self._secure_port = 0
        self._etcd_client_port = 0
        self._etcd_peer_port = 0
        self._sa_controller: _DefaultServiceAccountController | None = None
        self.controllers = controllers
        self.nodes = tuple(nodes)
        self._controllers: ClusterControllers | None = None
        self._atexit_registered = False

    # -- public attributes ------------------------------------------------- #

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            raise ControlPlaneError("control plane not started")
        return self._work_dir

    @property
    def pki(self) -> ControlPlanePKI:
        if self._pki is None:
            raise ControlPlaneError("control plane not started")
        return self._pki

    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self._secure_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self._etcd_client_port}"

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the API server's serving cert and the client certs."""
        return self.pki.ca.cert_pem

    @property
    def kubeconfig_path(self) -> Path:
        return self.work_dir / "kubeconfig"

    @property
    def audit_log_path(self) -> Path:
        if not self.audit:
            raise ControlPlaneError("audit logging is off (ControlPlane(audit=False))")
        return self.work_dir / "audit.log"

    @property
    def etcd_log_path(self) -> Path:
        return self.work_dir / "etcd.log"

    @property
    def apiserver_log_path(self) -> Path:
        return self.work_dir / "kube-apiserver.log"

    @property
    def pids(self) -> dict[str, int]:
        pids = {
            name: proc.pid
            for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver))
            if proc is not None
        }
        if self._controllers is not None:
            pids.update(self._controllers.pids)
        return pids

    @property
    def running(self) -> bool:
        return (
            self._etcd is not None
            and self._apiserver is not None
            and self._etcd.poll() is None
            and self._apiserver.poll() is None
            and (self._controllers is None or self._controllers.running)
        )

    # -- lifecycle --------------------------------------------------------- #

    def start(self) -> Self:
        """Start etcd and kube-apiserver and wait until the API server is ready.

        On failure everything started so far is stopped and the error carries
        the tail of the process logs.
        """
        with self._lock:
            if self._apiserver is not None:
                raise ControlPlaneError("control plane already started")
            if not self._atexit_registered:
                atexit.register(self.stop)
                self._atexit_registered = True
            binaries = self._binaries = self._binaries or find_binaries()
            try:
                self._prepare_work_dir()
                self._start_processes(binaries)
            except BaseException as exc:
                logs = self._log_tails()
                work_dir = self._work_dir
                # Keep the logs for a post-mortem; a later run reaps the dir.
                self._remove_work_dir = False
                self._stop_locked()
                if isinstance(exc, ControlPlaneError | TimeoutError):
                    raise ControlPlaneError(
                        f"control plane failed to start: {exc}\n(logs kept in {work_dir})\n{logs}"
                    ) from exc
                raise
        return self

    def stop(self) -> None:
        """Stop both processes and remove the temp dir. Safe to call repeatedly."""
        with self._lock:
            self._stop_locked()

    def restart_apiserver(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver (SIGTERM, or SIGKILL when ``kill``) and start it again
        on the same port with the same etcd, certificates and audit log (appended
        to), waiting until it is ready. Clients reconnect on their own."""
        with self._lock:
            if self._apiserver is None or self._binaries is None:
                raise ControlPlaneError("control plane not started")
            self._stop_process(self._apiserver, kill=kill)
            self._start_apiserver(self._binaries.kube_apiserver, restart=True)

    def restart_etcd(self, *, kill: bool = False) -> None:
        """Stop etcd (SIGTERM, or SIGKILL when ``kill``) and start it again on the same
        ports and data directory: every object survives. Waits until etcd is healthy
        and the API server serves again."""
        with self._lock:
            if self._etcd is None or self._binaries is None:
                raise ControlPlaneError("control plane not started")
            self._stop_process(self._etcd, kill=kill)
            self._start_etcd(self._binaries.etcd, restart=True)
            wait_until(
                lambda: self.get("/readyz", timeout=5)[0] == 200,
                timeout=self.start_timeout,
                interval=0.25,
                description="kube-apiserver ready again after the etcd restart",
                abort=self._process_died,
            )

    @contextlib.contextmanager
    def apiserver_paused(self) -> Iterator[None]:
        """kube-apiserver SIGSTOPped for the block: requests hang (connections are
        accepted by the kernel, nothing answers), as with a partitioned control plane."""
        proc = self._apiserver
        if proc is None:
            raise ControlPlaneError("control plane not started")
        os.killpg(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)

    @staticmethod
    def _stop_process(proc: subprocess.Popen[bytes], *, kill: bool) -> None:
        if kill and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        terminate_process_group(proc)

    # -- clients ----------------------------------------------------------- #

    def configuration(self, keypair: KeyPair | None = None) -> Any:
        """A ``kubernetes.client.Configuration`` for the admin (or ``keypair``'s user)."""
        from kubernetes import client  # imported lazily: the CLI needs no client

        keypair = keypair or self.pki.admin
        creds = self.work_dir / "clients"
        creds.mkdir(exist_ok=True)
        cert = keypair.cert
        stem = f"{_safe_stem(cert.subject.rfc4514_string())}-{cert.serial_number:x}"
        cert_path, key_path = keypair.write(creds, stem)
        cfg = client.Configuration()
        cfg.host = self.server_url
        cfg.ssl_ca_cert = str(self.work_dir / "pki" / "ca.crt")
        cfg.cert_file = str(cert_path)
        cfg.key_file = str(key_path)
        cfg.verify_ssl = True
        return cfg

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` authenticated as the admin
        (``icache-admin``, group ``system:masters``). Close it when done."""
        from kubernetes import client

        return client.ApiClient(self.configuration())

    def client_keypair(self, user: str, groups: Iterable[str] = ()) -> KeyPair:
        """A client certificate for ``user`` in ``groups`` (no implicit privileges)."""
        return self.pki.ca.issue_client(user, groups)

    def api_client_for(self, user: str, groups: Iterable[str] = ()) -> Any:
        """A ``kubernetes.client.ApiClient`` authenticated as ``user`` via a client
        certificate, subject to RBAC like any other user."""
        from kubernetes import client

        return client.ApiClient(self.configuration(self.client_keypair(user, groups)))

    def write_kubeconfig(
        self, path: Path, keypair: KeyPair | None = None, *, server: str | None = None
    ) -> Path:
        """Write a self-contained kubeconfig (certificates inlined) to ``path``;
        ``server``: the URL to reach the API server at instead of its own (a proxy in
        front of it, on loopback where its certificate is valid)."""
        keypair = keypair or self.pki.admin
        user = keypair.cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "icache-test",
                    "cluster": {
                        "server": server or self.server_url,
                        "certificate-authority-data": b64_text(self.ca_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": str(user),
                    "user": {
                        "client-certificate-data": b64_text(keypair.cert_pem),
                        "client-key-data": b64_text(keypair.key_pem),
                    },
                }
            ],
            "contexts": [
                {"name": "icache-test", "context": {"cluster": "icache-test", "user": str(user)}}
            ],
            "current-context": "icache-test",
        }
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        """A raw GET as the admin (e.g. ``/readyz?verbose``, ``/version``)."""
        request = urllib.request.Request(self.server_url + path)
        try:
            with urllib.request.urlopen(request, context=self._ssl_context(), timeout=timeout) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read()

    # -- audit ------------------------------------------------------------- #

    def audit_offset(self) -> int:
        """The end of the last complete line of the audit log; pass it as
        ``since`` to only see requests made after this call."""
        return audit_log_end(self.audit_log_path)

    def audit_events(self, since: int = 0, **filters: Any) -> list[AuditEvent]:
        """Audit events from byte offset ``since``, filtered as in
        :meth:`AuditEvent.matches` (``verbs``, ``user``, ``resource``,
        ``subresource``, ``api_group``, ``namespace``, ``name``)."""
        events, _ = read_audit_log(self.audit_log_path, since)
        return [e for e in events if e.matches(**filters)]

    def write_events(self, since: int = 0, **filters: Any) -> list[AuditEvent]:
        """Like :meth:`audit_events` but only create/update/patch/delete/deletecollection."""
        filters.setdefault("verbs", WRITE_VERBS)
        return self.audit_events(since, **filters)

    def count_writes(self, since: int = 0, **filters: Any) -> int:
        """How many write requests the API server received since ``since``.

        Counts every write request that reached the API server, including ones
        it rejected (check ``AuditEvent.code`` via :meth:`write_events` to tell
        them apart). Filter by ``user`` to exclude the harness and the API
        server's own bookkeeping (``system:apiserver`` lease/endpoint updates).
        """
        return len(self.write_events(since, **filters))

    def audit_barrier(self, since: int = 0, timeout: float = 10.0) -> None:
        """Return once the audit log holds a request made by this call.

        The server writes an event just after it answers, so a request answered
        before this call is logged by the time the barrier's own (later) request is.
        Call it before asserting that something was *not* written.
        """
        marker = f"audit-barrier-{uuid.uuid4().hex[:12]}"
        status, _ = self.get(f"/api/v1/namespaces/default/configmaps/{marker}")
        if status != 404:
            raise ControlPlaneError(f"audit barrier: GET {marker} answered {status}, not 404")
        self.wait_for_audit_events(
            since, verbs=["get"], resource="configmaps", name=marker, timeout=timeout
        )

    def wait_for_audit_events(
        self, since: int = 0, *, count: int = 1, timeout: float = 10.0, **filters: Any
    ) -> list[AuditEvent]:
        """Poll until at least ``count`` events match (the server appends an
        event right after it answers, so a test should not read the log the
        instant its request returns). Returns all matching events."""

        def enough() -> list[AuditEvent] | None:
            events = self.audit_events(since, **filters)
            return events if len(events) >= count else None

        return wait_until(
            enough, timeout=timeout, description=f"{count} audit event(s) matching {filters}"
        )

    # -- internals ---------------------------------------------------------- #

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        pki_dir = self.work_dir / "pki"
        ctx.load_cert_chain(pki_dir / "admin.crt", pki_dir / "admin.key")
        return ctx

    def _prepare_work_dir(self) -> None:
        if self._requested_work_dir is not None:
            self._work_dir = self._requested_work_dir.resolve()
            self._work_dir.mkdir(parents=True, exist_ok=True)
            if self._remove_work_dir is None:
                self._remove_work_dir = False
        else:
            self._work_dir = make_owned_temp_dir("icache-cp-")
            if self._remove_work_dir is None:
                self._remove_work_dir = os.environ.get("ICACHE_CP_KEEP", "") in ("", "0")
        pki_dir = self._work_dir / "pki"
        pki_dir.mkdir(mode=0o700, exist_ok=True)
        self._pki = pki = ControlPlanePKI.generate()
        pki.ca.key_pair.write(pki_dir, "ca")
        pki.serving.write(pki_dir, "apiserver")
        pki.admin.write(pki_dir, "admin")
        (pki_dir / "sa.key").touch(mode=0o600)
        (pki_dir / "sa.key").write_bytes(pki.service_account_key_pem)
        (pki_dir / "sa.pub").write_bytes(pki.service_account_pub_pem)
        if self.audit:
            (self._work_dir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))

    def _start_processes(self, binaries: Binaries) -> None:
        # Ports are picked then bound by the child; on the rare collision the
        # child exits and we retry with fresh ports.
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                self._start_etcd(binaries.etcd)
                self._start_apiserver(binaries.kube_apiserver)
                break
            except ControlPlaneError:
                if attempt == attempts or "address already in use" not in self._log_tails():
                    raise
                self._kill_processes()
        self.write_kubeconfig(self.kubeconfig_path)
        wait_until(
            lambda: self.get("/api/v1/namespaces/default")[0] == 200,
            timeout=self.start_timeout,
            description="namespace default",
            abort=self._process_died,
        )
        if self.controllers:
            from tests.harness.controllers import ClusterControllers, ControllerBinaries

            assert self._binaries is not None
            self._controllers = ClusterControllers(
                self,
                ControllerBinaries.beside(self._binaries.kube_apiserver.parent),
                nodes=self.nodes,
                timeout=self.start_timeout,
            )
            self._controllers.start()
        elif self.service_account_admission:
            self._sa_controller = _DefaultServiceAccountController(self)
            self._sa_controller.start()

    def _start_etcd(self, etcd: Path, *, restart: bool = False) -> None:
        work = self.work_dir
        if not restart:
            self._etcd_client_port = free_port()
            self._etcd_peer_port = free_port()
        client_port, peer_port = self._etcd_client_port, self._etcd_peer_port
        data_dir = work / "etcd-data"
        if data_dir.exists() and not restart:
            shutil.rmtree(data_dir)
        peer_url = f"http://127.0.0.1:{peer_port}"
        args = [
            str(etcd),
            "--name=icache-test",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=icache-test={peer_url}",
            "--initial-cluster-state=new",
            # Throwaway data: skip fsync, it dominates write latency on CI disks.
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ]
        self._etcd = self._spawn(args, self.etcd_log_path)
        health_url = f"{self.etcd_url}/health"

        def healthy() -> bool:
            with urllib.request.urlopen(health_url, timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")

        wait_until(
            healthy,
            timeout=self.start_timeout,
            description=f"etcd health at {health_url} (client port {client_port})",
            abort=self._process_died,
        )

    def _start_apiserver(self, apiserver: Path, *, restart: bool = False) -> None:
        work = self.work_dir
        pki_dir = work / "pki"
        if not restart:
            self._secure_port = free_port()
        args = [
            str(apiserver),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._secure_port}",
            f"--cert-dir={work / 'apiserver-certs'}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            f"--etcd-servers={self.etcd_url}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            "--profiling=false",
        ]
        if not self.service_account_admission:
            args.append("--disable-admission-plugins=ServiceAccount")
        if self.controllers:
            args += [
                # Pods that request a GPU tolerate the GPU nodes' taint, as on GKE/EKS.
                "--enable-admission-plugins=ExtendedResourceToleration",
                # MutatingAdmissionPolicy (beta, off by default in 1.35): tests inject
                # a sidecar into pods the way a service mesh's webhook would.
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
            ]
        if self.audit:
            args += [
                f"--audit-policy-file={work / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log_path}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--audit-log-maxsize=0",
            ]
        args += self.extra_apiserver_args
        self._apiserver = self._spawn(args, self.apiserver_log_path)

        def ready() -> bool:
            status, _ = self.get("/readyz", timeout=5)
            return status == 200

        try:
            wait_until(
                ready,
                timeout=self.start_timeout,
                interval=0.25,
                description=f"kube-apiserver {self.server_url}/readyz",
                abort=self._process_died,
            )
        except TimeoutError as exc:
            try:
                detail = self.get("/readyz?verbose", timeout=5)[1].decode(errors="replace")
            except OSError as err:
                detail = repr(err)
            raise ControlPlaneError(f"{exc}\n/readyz?verbose:\n{detail}") from exc

    def _spawn(self, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        return spawn_in_own_group(args, log_path, self.work_dir)

    def _process_died(self) -> str | None:
        for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver)):
            if proc is not None and proc.poll() is not None:
                return f"{name} exited with code {proc.returncode}"
        return None if self._controllers is None else self._controllers.process_died()

    def _log_tails(self) -> str:
        if self._work_dir is None:
            return ""
        parts = []
        extra = [] if self._controllers is None else self._controllers.log_paths
        for path in (self.etcd_log_path, self.apiserver_log_path, *extra):
            if path.exists():
                parts.append(f"----- {path} (tail) -----\n{tail(path)}")
        return "\n".join(parts)

    def _kill_processes(self) -> None:
        # Controllers, then the API server: each would otherwise log connection errors.
        if self._controllers is not None:
            self._controllers.stop()
            self._controllers = None
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                terminate_process_group(proc)
        self._apiserver = self._etcd = None

    def _stop_locked(self) -> None:
        controller, self._sa_controller = self._sa_controller, None
        if controller is not None:
            controller.signal_stop()
        self._kill_processes()
        if controller is not None:
            controller.finish()  # its watch ends with the API server
        if self._work_dir is not None and self._remove_work_dir:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None if self._remove_work_dir else self._work_dir


def _safe_stem(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def b64_text(data: bytes) -> str:
    """``data`` base64-encoded, as text: how a kubeconfig inlines a certificate and a
    Secret's ``data`` holds a value."""
    return base64.b64encode(data).decode()


class _DefaultServiceAccountController(threading.Thread):
    """A thread that creates the ``default`` ServiceAccount in every namespace, as
    kube-controller-manager's serviceaccount controller would.

    The ServiceAccount admission plugin retries its lookup of ``default`` for a
    second or two, so a Pod created right after its namespace is admitted once
    this thread catches up.
    """

    def __init__(self, control_plane: ControlPlane) -> None:
        from kubernetes import client

        keypair = control_plane.client_keypair(SERVICE_ACCOUNT_CONTROLLER_USER, [SYSTEM_MASTERS])
        self._api = client.ApiClient(control_plane.configuration(keypair))
        self._core = client.CoreV1Api(self._api)
        self._stopping = threading.Event()
        self._response: Any = None  # the open watch, so stop can interrupt it
        super().__init__(name="icache-default-serviceaccounts", daemon=True)

    def signal_stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            # Unblocks the read in the watch thread; otherwise kube-apiserver
            # waits for the open watch before it shuts down.
            with contextlib.suppress(Exception):
                response.shutdown()

    def finish(self) -> None:
        """Wait for the thread (after ``signal_stop``) and close its client."""
        self.join(timeout=10)
        self._api.close()

    def _ensure(self, namespace: str) -> None:
        from kubernetes import client

        body = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
        try:
            self._core.create_namespaced_service_account(namespace, body)
        except client.ApiException as exc:
            # 409: exists; 403/404: namespace terminating or gone.
            if exc.status not in (403, 404, 409):
                raise

    def _events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, namespace as a dict): a list, then a watch from it."""
        # Raw responses (urllib3) rather than models: the watch must be closable.
        listed: Any = self._core.list_namespace(_preload_content=False)
        namespaces = json.loads(listed.data)
        for ns in namespaces["items"]:
            yield "ADDED", ns
        resource_version = namespaces["metadata"]["resourceVersion"]
        while not self._stopping.is_set():
            response: Any = self._core.list_namespace(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=300,
                _preload_content=False,
            )
            self._response = response
            try:
                if self._stopping.is_set():
                    return
                for line in response:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # typically 410 Gone: relist
                        raise ControlPlaneError(f"namespace watch: {event['object']}")
                    rv = event["object"].get("metadata", {}).get("resourceVersion")
                    resource_version = rv or resource_version
                    yield event["type"], event["object"]
            finally:
                self._response = None
                response.release_conn()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                for kind, ns in self._events():
                    phase = (ns.get("status") or {}).get("phase")
                    if kind in ("ADDED", "MODIFIED") and phase != "Terminating":
                        self._ensure(ns["metadata"]["name"])
            except Exception:
                if self._stopping.is_set():
                    return
                # The watch expired or the server hiccupped: relist.
                self._stopping.wait(0.5)
