"""The Redis URL the dispatcher and the worker connect with: password and TLS defaults.

The install keeps the URL (no secret in it) in a ConfigMap and the password in a
Secret, exposed as ``ICACHE_REDIS_PASSWORD``; :func:`redis_url` joins them, so the
password never has to be spelled inside a URL in a manifest. A password already in
the URL wins (an operator who put a whole URL in a Secret meant it).

``rediss://`` (TLS) URLs verify the server certificate unless told otherwise: kombu
would otherwise fall back to ``CERT_NONE`` with only a warning, and Celery's Redis
result backend refuses a ``rediss://`` URL without ``ssl_cert_reqs``. The same query
parameters (``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``)
are read by redis-py (the work queue), kombu (``broker_use_ssl``) and Celery's
backend (``redis_backend_use_ssl``), so one URL configures all three.
"""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

PASSWORD_ENV: Final = "ICACHE_REDIS_PASSWORD"
TLS_SCHEME: Final = "rediss"
CERT_REQS_PARAM: Final = "ssl_cert_reqs"
SCHEMES: Final = ("redis", "rediss", "unix")


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def check_url(url: str) -> None:
    """Raise ``ValueError`` saying what is wrong with a Redis URL, by the rules redis-py
    and kombu read it with: scheme redis://, rediss:// or unix://; a numeric port; the
    database a number (the path ``/N``, or ``?db=N``). The message never shows the
    password."""
    shown = repr(redacted(url))
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(
            f"{shown} is not a Redis URL: the scheme must be "
            f"{', '.join(s + '://' for s in SCHEMES[:-1])} or {SCHEMES[-1]}://"
        )
    databases = [value for key, value in parse_qsl(parts.query) if key == "db"]
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"{shown}: a unix:// URL needs the socket's path")
    else:
        try:
            parts.port  # noqa: B018 - urlsplit checks the port when it is read
        except ValueError:
            raise ValueError(f"{shown}: the port must be a number (0-65535)") from None
        path = parts.path.strip("/")
        if path:
            databases.append(path)
    if not all(db.isdigit() for db in databases):
        raise ValueError(f"{shown}: the database must be a number (redis://host:6379/0)")


def with_password(url: str, password: str | None) -> str:
    """``url`` with ``password`` as its credentials, unless it carries one already
    (or ``password`` is empty). A username in the URL (Redis ACL user) is kept."""
    if not password:
        return url
    parts = urlsplit(url)
    if parts.password is not None or not parts.hostname:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{user}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def with_tls_defaults(url: str) -> str:
    """A ``rediss://`` URL with ``ssl_cert_reqs=required`` unless it says otherwise."""
    parts = urlsplit(url)
    if parts.scheme != TLS_SCHEME:
        return url
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == CERT_REQS_PARAM for key, _ in query):
        return url
    query.append((CERT_REQS_PARAM, "required"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def redis_url(url: str, password: str | None = None) -> str:
    """The URL to connect with: ``url`` plus the password (default: from the
    environment) plus the TLS defaults. ``ValueError`` (:func:`check_url`) when ``url``
    is not a Redis URL."""
    check_url(url)
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    return with_tls_defaults(with_password(url, password))
