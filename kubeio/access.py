"""How every process and tool reaches the Kubernetes API.

The dispatcher, the workers, the webhook and ``icache certs`` all connect here, so
they find their configuration the same way, first match wins:

1. ``--kubeconfig`` (with ``--context``, where a tool has one): that file only;
2. in-cluster: the pod's ServiceAccount (``KUBERNETES_SERVICE_HOST``/``_PORT`` and
   the mounted token);
3. ``KUBECONFIG``: the files it lists, merged as kubectl merges them;
4. ``~/.kube/config``.

A source that is absent is skipped. A source that is present but unusable (a
``KUBECONFIG`` naming no file, a broken kubeconfig, a mounted token without a CA) is
an error, not a reason to try the next one: the next kubeconfig may well point at
another cluster, and ``icache certs`` writes Secrets. When nothing is found,
:class:`KubeConfigError` names every source tried and why it did not apply.

The official client's own defaults are not used: it reads ``KUBECONFIG`` once, at
import, and its in-cluster and kubeconfig loaders each know only their half of the
order.

Both faces of the API client are configured here: the synchronous
:class:`kubeio.client.Kube` (the reconciler, the dispatcher, ``icache certs`` and
doctor) and the webhook's asyncio :class:`kubeio.async_client.ApiServer`. The rules
they share live beside this module: the per-request timeout and the retry and
Retry-After policy in :mod:`kubeio.retries`, the API paths of every resource in
:mod:`kubeio.resources`.

This module imports the official client only when called: ``icache`` imports it to
report a :class:`KubeConfigError` as one line, and ``icache crd`` and the webhook's
embedded mode need not pay for it.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from kubeio.retries import DEFAULT_TIMEOUT_SECONDS, urllib3_retries

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient as AsyncApiClient
    from kubernetes.client import ApiClient, Configuration

    from kubeio.client import Kube

log = logging.getLogger("icache.kube")

SERVICEACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG: Final = "~/.kube/config"
KUBECONFIG_HELP: Final = (
    "kubeconfig file (default: the in-cluster ServiceAccount, then $KUBECONFIG, "
    "then ~/.kube/config)"
)


class KubeConfigError(Exception):
    """No usable Kubernetes configuration; the message names every source tried."""

    def __init__(self, tried: Sequence[str], problem: str | None = None) -> None:
        self.tried = list(tried)
        self.problem = problem
        head = (
            f"cannot load the Kubernetes configuration: {problem}"
            if problem
            else ("no Kubernetes configuration found")
        )
        super().__init__(f"{head} (tried: {'; '.join(self.tried)})" if self.tried else head)


@dataclass(frozen=True)
class Loaded:
    """A client configuration and the source it came from (for logs and errors)."""

    configuration: Configuration
    source: str


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)


def load_configuration(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    serviceaccount_dir: Path = SERVICEACCOUNT_DIR,
) -> Loaded:
    """The client configuration, from the first source present (module docstring).

    ``context`` selects a kubeconfig context; naming one skips the in-cluster step,
    which has no contexts. ``serviceaccount_dir`` is where the in-cluster token and
    CA are mounted (a parameter for tests)."""
    tried: list[str] = []
    if kubeconfig:
        return _from_kubeconfig(kubeconfig, context, f"--kubeconfig {kubeconfig}", tried)
    tried.append("--kubeconfig: not given")

    if context:
        tried.append(f"in-cluster: skipped (--context {context} names a kubeconfig context)")
    else:
        absent = _incluster_absent(serviceaccount_dir)
        if absent:
            tried.append(f"in-cluster: {absent}")
        else:
            return _from_incluster(serviceaccount_dir, tried)

    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        found = [p for p in listed if Path(p).expanduser().is_file()]
        source = f"KUBECONFIG={os.pathsep.join(listed)}"
        if not found:
            raise KubeConfigError(tried, f"{source}: none of its files exists")
        return _from_kubeconfig(os.pathsep.join(found), context, source, tried)
    tried.append("KUBECONFIG: not set")

    default = Path(DEFAULT_KUBECONFIG).expanduser()
    if default.is_file():
        return _from_kubeconfig(str(default), context, f"{DEFAULT_KUBECONFIG} ({default})", tried)
    tried.append(f"{DEFAULT_KUBECONFIG}: {default} does not exist")
    raise KubeConfigError(tried)


def api_client(kubeconfig: str | None = None, *, context: str | None = None) -> ApiClient:
    """An official-client ApiClient on the loaded configuration (for code that still
    uses the generated APIs, e.g. the webhook's CacheBackend list)."""
    from kubernetes.client import ApiClient

    loaded = load_configuration(kubeconfig, context=context)
    log.info(
        "kubernetes configuration loaded",
        extra={"source": loaded.source, "server": loaded.configuration.host},
    )
    return ApiClient(loaded.configuration)


def async_client_for(loaded: Loaded, pool_size: int = 16) -> AsyncApiClient:
    """The official client's asyncio ApiClient (``kubernetes.aio``, on aiohttp) for a
    loaded configuration: the same source, server, TLS files, proxy and token as
    :func:`api_client`. The bearer token is refreshed through the synchronous
    configuration's own hook (the mounted ServiceAccount token re-read, a kubeconfig
    exec plugin re-run), so both clients follow one rule. No retries of its own and no
    proxy taken from the environment (the synchronous client takes neither): the
    caller owns its time budget. Create and use it on one event loop."""
    from kubernetes.aio.client import ApiClient as AsyncApiClient
    from kubernetes.aio.client import Configuration as AsyncConfiguration

    source = loaded.configuration
    target = AsyncConfiguration(host=source.host)
    for name in (
        "ssl_ca_cert",
        "cert_file",
        "key_file",
        "verify_ssl",
        "tls_server_name",
        "proxy",
        "proxy_headers",
    ):
        setattr(target, name, getattr(source, name))
    target.api_key = dict(source.api_key)
    target.api_key_prefix = dict(source.api_key_prefix)
    target.retries = None
    target.connection_pool_maxsize = pool_size
    target.client_session_kwargs = {"trust_env": False}
    refresh = source.refresh_api_key_hook
    if refresh is not None:

        def refresh_token(configuration: AsyncConfiguration) -> None:
            refresh(source)
            configuration.api_key = dict(source.api_key)
            configuration.api_key_prefix = dict(source.api_key_prefix)

        target.refresh_api_key_hook = refresh_token
    log.info(
        "kubernetes configuration loaded",
        extra={"source": loaded.source, "server": source.host, "client": "asyncio"},
    )
    return AsyncApiClient(target)


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context, as kubectl would use it."""
    try:
        from kubernetes.config import kube_config

        files = (
            kubeconfig or os.environ.get("KUBECONFIG") or kube_config.KUBE_CONFIG_DEFAULT_LOCATION
        )
        contexts, current = kube_config.list_kube_config_contexts(
            config_file=files.split(os.pathsep)[0]
        )
        chosen = next((x for x in contexts if x["name"] == context), None) if context else current
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    except Exception:  # no kubeconfig (in-cluster) or an unreadable one: kubectl's default
        return "default"


def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Kube:
    """The :class:`kubeio.client.Kube` every process uses; ``timeout`` bounds
    each non-watch request."""
    from kubeio.client import Kube

    return Kube(api_client(kubeconfig, context=context), timeout=timeout)


# ------------------------------------------------------------------ sources


def _new_configuration() -> Configuration:
    from kubernetes.client import Configuration

    configuration = Configuration()
    configuration.retries = urllib3_retries()
    return configuration


def _from_kubeconfig(paths: str, context: str | None, source: str, tried: list[str]) -> Loaded:
    import yaml
    from kubernetes.config import ConfigException, load_kube_config

    listed = [p for p in paths.split(os.pathsep) if p]
    folders = [p for p in listed if Path(p).expanduser().is_dir()]
    if folders:
        raise KubeConfigError(
            tried, f"{source}: {', '.join(folders)} is a directory, not a kubeconfig file"
        )
    missing = [p for p in listed if not Path(p).expanduser().is_file()]
    if missing:
        raise KubeConfigError(tried, f"{source}: {', '.join(missing)} does not exist")
    for path in paths.split(os.pathsep):
        if path:
            shape = _kubeconfig_shape_error(Path(path).expanduser())
            if shape:
                where = source if path == paths else f"{source}: {path}"
                raise KubeConfigError(tried, f"{where}: {shape}")
    configuration = _new_configuration()
    # The client reports a failed exec credential plugin only by logging it (on the
    # root logger) and goes on without credentials: caught here, it is what it is, a
    # kubeconfig that cannot work.
    plugin_errors = _ClientErrors()
    root = logging.getLogger()
    root.addHandler(plugin_errors)
    try:
        load_kube_config(config_file=paths, context=context, client_configuration=configuration)
    except (ConfigException, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        # The client raises bare KeyError/TypeError on malformed files, and PyYAML's
        # errors on a file that is not YAML.
        raise KubeConfigError(tried, f"{source}: {_describe(exc)}") from exc
    finally:
        root.removeHandler(plugin_errors)
    if plugin_errors.messages:
        raise KubeConfigError(
            tried,
            f"{source}: the user's exec credential plugin failed: {plugin_errors.messages[0]}",
        )
    scheme = urlsplit(str(configuration.host)).scheme
    if scheme not in ("http", "https"):
        raise KubeConfigError(
            tried,
            f"{source}: the cluster's server {configuration.host!r} is not an http:// or "
            "https:// URL",
        )
    return Loaded(configuration, source)


class _ClientErrors(logging.Handler):
    """The error records the official client's kubeconfig loader logs while loading."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "root" and record.module == "kube_config":
            self.messages.append(" ".join(record.getMessage().split()))


def _incluster_absent(serviceaccount_dir: Path) -> str | None:
    """Why this is not a pod with a ServiceAccount token, or None when it is."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        if not os.environ.get(name):
            return f"{name} not set (not in a pod)"
    token = serviceaccount_dir / "token"
    if not token.is_file():
        return f"no ServiceAccount token at {token}"
    return None


def _from_incluster(serviceaccount_dir: Path, tried: list[str]) -> Loaded:
    from kubernetes.config import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    source = "in-cluster ServiceAccount"
    configuration = _new_configuration()
    try:
        InClusterConfigLoader(
            token_filename=str(serviceaccount_dir / "token"),
            cert_filename=str(serviceaccount_dir / "ca.crt"),
        ).load_and_set(configuration)
    except (ConfigException, OSError) as exc:
        raise KubeConfigError(tried, f"{source}: {_describe(exc)}") from exc
    return Loaded(configuration, source)


def _kubeconfig_shape_error(path: Path) -> str | None:
    """Why ``path`` cannot be a kubeconfig at all (not YAML, or not a mapping), said in
    words rather than as the client's TypeError; None when it may be one."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        return f"not YAML: {_describe(exc)}"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read it: {_describe(exc)}"
    if document is None:
        return "the file is empty"
    if not isinstance(document, dict):
        return f"not a kubeconfig: a YAML mapping was expected, found {type(document).__name__}"
    return None


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # one line: YAML errors span several
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
