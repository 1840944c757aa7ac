"""When a request to the API server is sent again, and how long one may take: one
policy for both faces of the client (the synchronous ``kubeio.client.Kube`` and the
webhook's asyncio ``kubeio.async_client.ApiServer``), decided by
:func:`retry_after_wait`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from urllib3 import Retry

# Per-request budget of a plain (non-watch) call, unless the caller passes its own.
DEFAULT_TIMEOUT_SECONDS: Final = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """When a request is sent again. One policy for both faces of the client.

    An answer: a status in ``retry_after_statuses`` that says how long to wait
    (Retry-After, in seconds) is waited out and the request sent again, as client-go
    does, while the wait fits in what is left of the request's time budget and the
    request has been sent fewer than ``sends`` times. A restarted API server answers
    "storage is (re)initializing" for a moment after it reports ready. Only a request
    that may be sent twice is: an idempotent verb, or a POST that changes nothing
    (a SubjectAccessReview).

    A transport failure before any answer arrived: the synchronous face lets urllib3
    try ``connection_retries`` more times (connection errors on any verb, since nothing
    was sent; read errors on idempotent verbs only); the asyncio face sends a request
    once more on a new connection when a pooled one the server had closed drops it
    (``stale_connection_resends``). A partial answer is never retried."""

    sends: int = 5
    retry_after_statuses: frozenset[int] = frozenset({429, 503})
    idempotent_methods: frozenset[str] = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
    connection_retries: int = 3
    stale_connection_resends: int = 1


RETRY_POLICY: Final = RetryPolicy()


def parse_retry_after(value: str | None) -> float | None:
    """A Retry-After header's delay in seconds (the API server sends whole seconds);
    None when absent or not a number of seconds."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value)


def retry_after_wait(
    status: int,
    retry_after: str | None,
    *,
    sent: int,
    remaining: float,
    replayable: bool,
    policy: RetryPolicy = RETRY_POLICY,
) -> float | None:
    """Seconds to wait before sending a request again after this answer, or None when
    ``status`` is the answer (the rule: :class:`RetryPolicy`). ``sent``: how many times
    the request went out, this one included; ``remaining``: seconds left of its budget;
    ``replayable``: whether sending it twice is harmless."""
    if not replayable or sent >= policy.sends or status not in policy.retry_after_statuses:
        return None
    seconds = parse_retry_after(retry_after)
    if seconds is None or seconds >= remaining:
        return None
    return seconds


def urllib3_retries(policy: RetryPolicy = RETRY_POLICY) -> Retry:
    """The synchronous face's transport retries: urllib3's, without its own Retry-After
    rule (the client waits Retry-After out by :func:`retry_after_wait`)."""
    from urllib3 import Retry

    return Retry(total=policy.connection_retries, respect_retry_after_header=False)
