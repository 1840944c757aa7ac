"""The structured provider Binding that joins a storage provider to a runtime adapter.

A storage provider emits a binding (protocol + endpoint); the runtime adapter declares
which protocols it accepts (``None`` is host-only, no remote tier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from shared import constants as c

Protocol = Literal["lm", "resp", "mooncakestore"]

PROVIDER_PROTOCOL: Final[dict[str, Protocol]] = {
    c.PROVIDER_LMCACHE_SERVER: "lm",
    c.PROVIDER_REDIS: "resp",
    c.PROVIDER_MOONCAKE: "mooncakestore",
}


@dataclass(frozen=True)
class Binding:
    protocol: Protocol
    # host:port without a scheme; empty when a managed Service has not published yet.
    endpoint: str
    # The Secret (in the engine pod's namespace) whose ``password`` key the tier
    # requires, for a managed Redis; None: the tier takes no credentials from us. A
    # name only: adapters wire a secretKeyRef to it, never its value.
    password_secret: str | None = None
    # The Secret may not exist (yet): a cross-namespace consumer's copy, which the
    # reconciler creates only when the tier's owner consented. The reference is then
    # optional, so a missing copy never keeps the engine pod from starting (its
    # backend says the credentials are missing instead).
    password_optional: bool = False
