"""Redis authentication by default, end to end: the real `icache dispatcher` and
`icache worker` run against a Redis that requires a password, given — as the install
gives them — a password-free URL plus ICACHE_REDIS_PASSWORD, and a backend converges."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.e2e.conftest import Cluster, Stack, converged_with_endpoint
from tests.harness.redis_server import RedisServer

PASSWORD = "e2e-redis-password"


class EnvPasswordStack(Stack):
    """Processes get the URL without credentials; the password comes from the env."""

    @property
    def redis_url(self) -> str:
        return self.redis_server.url_for_db(self.db, with_password=False)


@pytest.fixture
def auth_stack(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[EnvPasswordStack]:
    server = RedisServer(password=PASSWORD).start()
    # Inherited by the spawned processes, like the Deployments' secretKeyRef env.
    monkeypatch.setenv("ICACHE_REDIS_PASSWORD", PASSWORD)
    stack = EnvPasswordStack(cluster, server, tmp_path, db=0)
    first_namespace = len(cluster.namespaces)
    try:
        yield stack
    finally:
        stack.stop()
        server.stop()
        cluster.delete_backends(cluster.namespaces[first_namespace:])


def test_dispatcher_and_worker_reconcile_through_a_password_protected_redis(
    cluster: Cluster, auth_stack: EnvPasswordStack
) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(auth_stack.redis_url).ping()
    auth_stack.start_dispatcher()
    auth_stack.start_worker()
    ns = cluster.namespace()
    cluster.create_cb(
        ns,
        "auth",
        {"runtime": "VLLM", "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"}},
    )

    try:
        cluster.wait_cb(
            ns, "auth", converged_with_endpoint, "converged through the authenticated Redis", 90
        )
    except AssertionError:
        print(auth_stack.logs())
        raise
    # The work queue's keys are in the protected server.
    authed = redis.Redis.from_url(auth_stack.redis_server.url_for_db(0))
    assert authed.dbsize() > 0
