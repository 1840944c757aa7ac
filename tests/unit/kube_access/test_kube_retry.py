"""One retry and Retry-After policy for both faces of the Kubernetes client.

``kubeio.retries.retry_after_wait`` is the one rule (pure, table-tested here); the
synchronous ``kubeio.client.Kube`` follows it against a scripted HTTP/1.1 server on
127.0.0.1 (the webhook's asyncio ``ApiServer`` is held to it in test_apiserver.py).
The rule is client-go's: an answer 429 or 503 that says how long to wait
(Retry-After) is waited out and the request sent again, while the wait fits in the
request's budget, for a request that may be sent twice, at most
``RETRY_POLICY.sends`` times in all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from kubeio import access as kubeaccess
from kubeio.client import ApiError, Kube
from kubeio.resources import PODS
from kubeio.retries import RETRY_POLICY, parse_retry_after, retry_after_wait, urllib3_retries
from tests.fakes import Script, ScriptedHttpServer

# ------------------------------------------------------------------ the rule


@pytest.mark.parametrize(
    ("status", "header", "sent", "remaining", "replayable", "wait"),
    [
        (429, "1", 1, 5.0, True, 1.0),  # waited out
        (503, "0", 1, 5.0, True, 0.0),
        (429, None, 1, 5.0, True, None),  # says nothing of how long: the answer
        (429, "soon", 1, 5.0, True, None),
        (429, "Wed, 21 Oct 2015 07:28:00 GMT", 1, 5.0, True, None),  # seconds only
        (500, "1", 1, 5.0, True, None),  # not a status to wait out
        (200, "1", 1, 5.0, True, None),
        (429, "5", 1, 5.0, True, None),  # does not fit in what is left
        (429, "1", 1, 0.5, True, None),
        (429, "1", RETRY_POLICY.sends - 1, 5.0, True, 1.0),
        (429, "1", RETRY_POLICY.sends, 5.0, True, None),  # sent as often as allowed
        (429, "1", 1, 5.0, False, None),  # may not be sent twice
    ],
    ids=[
        "429",
        "503",
        "no-header",
        "not-a-number",
        "http-date",
        "500",
        "200",
        "as-long-as-the-budget",
        "past-the-budget",
        "last-resend",
        "sends-used-up",
        "not-replayable",
    ],
)
def test_retry_after_wait_is_the_one_rule(
    status: int,
    header: str | None,
    sent: int,
    remaining: float,
    replayable: bool,
    wait: float | None,
) -> None:
    """Rule (client-go's Retry-After handling, bounded by the caller's budget): wait
    and send again only for 429/503 with a Retry-After in seconds that is shorter than
    the budget left, for a replayable request not yet sent ``sends`` times."""
    got = retry_after_wait(status, header, sent=sent, remaining=remaining, replayable=replayable)
    assert got == wait


def test_retry_after_is_whole_seconds() -> None:
    """Rule: the API server sends Retry-After as delta-seconds; spaces are tolerated."""
    assert parse_retry_after(" 2 ") == 2.0
    assert parse_retry_after("-1") is None
    assert parse_retry_after("") is None


def test_the_policy_is_the_webhooks_and_the_processes_one() -> None:
    """Rule: one policy object; the figures each face used before it stay (five sends,
    429 and 503, urllib3's three transport retries, one resend on a stale connection),
    and urllib3 keeps no Retry-After rule of its own."""
    assert RETRY_POLICY.sends == 5
    assert RETRY_POLICY.retry_after_statuses == {429, 503}
    assert RETRY_POLICY.connection_retries == 3
    assert RETRY_POLICY.stale_connection_resends == 1
    assert "POST" not in RETRY_POLICY.idempotent_methods
    assert "PATCH" not in RETRY_POLICY.idempotent_methods
    retries = urllib3_retries()
    assert retries.total == RETRY_POLICY.connection_retries
    assert not retries.respect_retry_after_header


# ------------------------------------------------------------------ the sync face


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Script, float], tuple[ScriptedHttpServer, Kube]]]:
    """A scripted server and a ``Kube`` connected to it the way every process
    connects (kubeio.access.connect from a kubeconfig), with a request budget."""
    started: list[tuple[ScriptedHttpServer, Kube]] = []

    def start(script: Script, timeout: float) -> tuple[ScriptedHttpServer, Kube]:
        server = ScriptedHttpServer(script)
        path = tmp_path / f"kubeconfig-{server.port}"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "s", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}
                    ],
                    "users": [{"name": "u", "user": {"token": "t0k"}}],
                    "contexts": [{"name": "s", "context": {"cluster": "s", "user": "u"}}],
                    "current-context": "s",
                }
            )
        )
        kube = kubeaccess.connect(str(path), timeout=timeout)
        started.append((server, kube))
        return server, kube

    yield start
    for server, kube in started:
        kube.close()
        server.close()


LIST = b'{"kind": "PodList", "metadata": {}, "items": []}'


def busy(times: int, status: int = 429, retry_after: str = "0") -> Script:
    """``times`` answers ``status`` with Retry-After, then 200."""

    def script(number: int) -> tuple[int, dict[str, str], bytes]:
        if number <= times:
            return status, {"Retry-After": retry_after}, b"{}"
        return 200, {}, LIST

    return script


def test_the_sync_client_waits_out_a_retry_after(serve) -> None:
    """Rule: a GET answered 429, then 503, each with a Retry-After that fits, is sent
    again and its final answer returned."""

    def script(number: int) -> tuple[int, dict[str, str], bytes]:
        if number <= 2:
            return (429 if number == 1 else 503), {"Retry-After": "0"}, b"{}"
        return 200, {}, LIST

    server, kube = serve(script, 5.0)
    assert kube.list(PODS, "ns")["items"] == []
    assert server.requests == ["GET /api/v1/namespaces/ns/pods"] * 3


def test_the_sync_client_sends_at_most_the_policys_sends(serve) -> None:
    """Rule: after ``RETRY_POLICY.sends`` sends the last answer stands, and it is the
    client's usual ApiError (not a transport library's exhausted-retries error)."""
    server, kube = serve(busy(100), 5.0)
    with pytest.raises(ApiError) as failed:
        kube.get(PODS, "ns", "p")
    assert failed.value.status == 429
    assert len(server.requests) == RETRY_POLICY.sends


def test_the_sync_client_does_not_wait_past_its_budget(serve) -> None:
    """Rule: a Retry-After as long as the request's budget is not waited out: the
    answer is returned at once."""
    server, kube = serve(busy(1, retry_after="2"), 1.0)
    with pytest.raises(ApiError) as failed:
        kube.get(PODS, "ns", "p")
    assert failed.value.status == 429
    assert len(server.requests) == 1


@pytest.mark.parametrize("verb", ["POST", "PATCH"])
def test_the_sync_client_never_sends_a_write_twice(serve, verb: str) -> None:
    """Rule: a request that is not idempotent is sent once, whatever the answer."""
    server, kube = serve(busy(1), 5.0)

    def write() -> object:
        if verb == "POST":
            return kube.create(PODS, "ns", {"metadata": {"name": "p"}})
        return kube.patch(PODS, "ns", "p", {}, content_type="application/merge-patch+json")

    with pytest.raises(ApiError) as failed:
        write()
    assert failed.value.status == 429
    assert len(server.requests) == 1


def test_a_watch_waits_out_a_retry_after(serve) -> None:
    """Rule: a watch's GET follows the same rule before its stream starts."""

    def script(number: int) -> tuple[int, dict[str, str], bytes]:
        if number == 1:
            return 429, {"Retry-After": "0"}, b"{}"
        event = b'{"type": "ADDED", "object": {"metadata": {"name": "p"}}}\n'
        return 200, {}, event

    server, kube = serve(script, 5.0)
    events = list(kube.watch(PODS, resource_version="1", namespace="ns", timeout_seconds=1))
    assert [e["object"]["metadata"]["name"] for e in events] == ["p"]
    assert len(server.requests) == 2


def test_doctors_reads_wait_out_a_retry_after_too(serve) -> None:
    """Rule: one retry policy for every API call: icache doctor's reads (which keep the
    server's Date header, so they take the raw answer) go through the same Retry-After
    rule as every other sync read."""
    from icache_install.doctor.reader import ClusterReader

    server, kube = serve(busy(2), 5.0)
    assert ClusterReader(kube).get(PODS, "ns", "p") == {
        "kind": "PodList",
        "metadata": {},
        "items": [],
    }
    assert server.requests == ["GET /api/v1/namespaces/ns/pods/p"] * 3
