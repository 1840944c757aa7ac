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
    environment) plus the TLS defaults."""
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    return with_tls_defaults(with_password(url, password))
