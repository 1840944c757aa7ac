"""SGLang prefill/decode disaggregation beside LMCache and HiCache (docs/api.md, "The
pod's own KV configuration"; docs/decisions.md): the pod's --disaggregation-* flags are
kept; a prefill server and a decode server with its radix cache enabled are wired; a
decode server without one is left unwired with its reason, since SGLang forces its
radix cache off there and neither tree runs."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from shared import constants as c
from shared.runtime_adapters.base import InjectContext, InjectionDeclinedError, RuntimeAdapter
from shared.runtime_adapters.kv_config import read_sglang_disaggregation
from shared.runtime_adapters.podspec import cli_tokens
from shared.runtime_adapters.sglang_hicache import SGLangHiCacheAdapter
from shared.runtime_adapters.sglang_lmcache import SGLangLMCacheAdapter
from tests.builders import container as make_container
from tests.builders import containers_of, hicache_backend, parsed_backend
from tests.builders import pod as make_pod

CTX = InjectContext()
IMAGE = "lmsysorg/sglang:v0.5.13-cu129"
PAIRS: list[tuple[RuntimeAdapter, Any]] = [
    (SGLangLMCacheAdapter(), functools.partial(parsed_backend, runtime="SGLang")),
    (SGLangHiCacheAdapter(), hicache_backend),
]
IDS = ["lmcache", "hicache"]


def sglang_pod(*args: str) -> dict[str, Any]:
    command = ["python3", "-m", "sglang.launch_server", "--model-path", "m", *args]
    return make_pod(make_container("sglang", image=IMAGE, command=command))


@pytest.mark.parametrize(("adapter", "backend"), PAIRS, ids=IDS)
@pytest.mark.parametrize(
    "args",
    [
        ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl"],
        ["--disaggregation-mode=prefill"],
        ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"],
        ["--disaggregation-mode", "null"],
    ],
)
def test_roles_that_run_the_cache_are_wired_with_their_flags_kept(
    adapter: RuntimeAdapter, backend: Any, args: list[str]
) -> None:
    out = adapter.inject(sglang_pod(*args), backend(), None, CTX)
    tokens = cli_tokens(containers_of(out)["sglang"])
    assert all(a in tokens for a in args)
    assert read_sglang_disaggregation(tokens) == read_sglang_disaggregation(args)


@pytest.mark.parametrize(("adapter", "backend"), PAIRS, ids=IDS)
@pytest.mark.parametrize(
    "args",
    [
        ["--disaggregation-mode", "decode"],
        ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"],
        ["--disaggregation-mode=prefill", "--disaggregation-mode=decode"],
    ],
)
def test_decode_server_without_a_radix_cache_fails_open_with_its_reason(
    adapter: RuntimeAdapter, backend: Any, args: list[str]
) -> None:
    with pytest.raises(InjectionDeclinedError) as raised:
        adapter.inject(sglang_pod(*args), backend(), None, CTX)
    assert raised.value.reason == c.WIRING_REASON_DISAGGREGATED_DECODE
    assert "--disaggregation-decode-enable-radix-cache" in str(raised.value)


def test_last_mode_wins() -> None:
    role = read_sglang_disaggregation(
        ["--disaggregation-mode", "decode", "--disaggregation-mode=prefill"]
    )
    assert role.mode == "prefill"
    assert not role.decode_without_radix_cache
