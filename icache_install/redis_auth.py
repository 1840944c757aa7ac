"""The bundled Redis's password Secret: created once with a random password, never
overwritten (rotating it is deleting it, re-running ``icache certs`` and restarting
Redis, the dispatcher and the workers)."""

from __future__ import annotations

import base64
from typing import Any, Final, Protocol

from shared import constants as c
from shared.storage_providers.render import new_password

DEFAULT_SECRET: Final = c.REDIS_AUTH_SECRET
PASSWORD_KEY: Final = "password"
# The label on what `icache certs` writes (the webhook TLS Secret, the Redis auth
# Secret): a managed-by of its own, not the reconciler's.
CERTS_MANAGED_BY_LABELS: Final = {"app.kubernetes.io/managed-by": "icache-certs"}


class RedisAuthError(Exception):
    """An existing Secret this tool must not touch and cannot use."""


class SecretStore(Protocol):
    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret, or None when it does not exist."""

    def write_secret(
        self, namespace: str, current: dict[str, Any] | None, body: dict[str, Any]
    ) -> None:
        """Create the Secret (``current`` None) or replace ``current`` with ``body``."""


def password_secret(name: str, namespace: str, password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(CERTS_MANAGED_BY_LABELS)},
        "type": "Opaque",
        "data": {PASSWORD_KEY: base64.b64encode(password.encode()).decode()},
    }


def ensure_password_secret(store: SecretStore, namespace: str, name: str) -> bool:
    """Create the Secret with a random password if it is missing; True if written.

    An existing Secret is the operator's (or an earlier run's) and is kept as is,
    provided it has the key the pods read."""
    current = store.read_secret(namespace, name)
    if current is not None:
        if PASSWORD_KEY not in (current.get("data") or {}):
            raise RedisAuthError(
                f"Secret {namespace}/{name} has no {PASSWORD_KEY!r} key, which Redis, the "
                "dispatcher and the workers read; add it or delete the Secret"
            )
        return False
    store.write_secret(namespace, None, password_secret(name, namespace, new_password()))
    return True
