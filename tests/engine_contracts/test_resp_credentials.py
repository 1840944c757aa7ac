"""Decision "No secret on a command line", against the published LMCache source at both
pin sets: the resp L2 adapter reads ``LMCACHE_RESP_PASSWORD`` and
``LMCACHE_RESP_USERNAME`` from its environment as the fallback of the ``password`` and
``username`` its ``--l2-adapter`` JSON leaves empty, so the MP worker we inject gets the
managed Redis's password in its environment only; and the checker refuses a worker whose
JSON carries the password."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import constants as c
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from shared.runtime_adapters.base import InjectContext
from tests import builders
from tests.engine_contracts.checks import check_l2_credentials
from tests.engine_contracts.releases import SETS, releases

pytestmark = pytest.mark.engine_contracts

SGLANG = {
    "name": "sglang",
    "image": "lmsysorg/sglang:v0.5.3",
    "command": ["python3", "-m", "sglang.launch_server"],
    "args": ["--model-path", "Qwen/Qwen3-8B"],
}


def managed_redis_worker() -> dict[str, Any]:
    cb = builders.backend(
        runtime=c.RUNTIME_SGLANG,
        type_=c.TYPE_LMCACHE,
        remote=builders.managed(c.PROVIDER_REDIS),
        status_endpoint="cache-redis.team-a.svc:6379",
    )
    result = wire_pod(builders.pod(SGLANG), [cb], InjectContext())
    assert result.outcome == OUTCOME_INJECTED, result.message
    worker: dict[str, Any] = next(
        i for i in result.pod["spec"]["initContainers"] if i["name"] == "lmcache-mp-worker"
    )
    return worker


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_the_resp_adapter_reads_its_credentials_from_the_environment(set_name: str) -> None:
    l2 = releases(set_name).lmcache.l2_types["resp"]
    assert l2.env.get("LMCACHE_RESP_PASSWORD") == "password"
    assert l2.env.get("LMCACHE_RESP_USERNAME") == "username"
    assert {"password", "username"} <= set(l2.keys), "the JSON keys the variables stand in for"


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_the_injected_worker_passes_the_password_by_environment_only(set_name: str) -> None:
    worker = managed_redis_worker()
    assert "LMCACHE_RESP_PASSWORD" in {e["name"] for e in worker["env"]}
    assert check_l2_credentials(releases(set_name).lmcache, worker) == []


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_a_password_in_the_json_is_refused(set_name: str) -> None:
    """The checker can fail: the shape this decision removed."""
    worker = managed_redis_worker()
    args = list(worker["args"])
    at = args.index("--l2-adapter") + 1
    args[at] = json.dumps({**json.loads(args[at]), "password": "$(LMCACHE_RESP_PASSWORD)"})
    failures = check_l2_credentials(releases(set_name).lmcache, {**worker, "args": args})
    assert any("carries 'password'" in f for f in failures), failures
