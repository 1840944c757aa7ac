"""SGLang native HiCache adapter: spec "SGLang native HiCache", per rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.api.models import CacheBackend
from shared.bindings import Binding
from shared.runtime_adapters.base import InjectionRejectedError
from shared.runtime_adapters.registry import select_adapter
from shared.runtime_adapters.sglang_hicache import SGLangHiCacheAdapter
from tests.builders import Injector, assert_valid_pod, containers_of
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import hicache_backend as backend
from tests.builders import pod as make_pod
from tests.builders import sglang_container as engine

ADAPTER = SGLangHiCacheAdapter()
inject = Injector(ADAPTER, backend)


def args_of(pod: dict[str, Any], name: str = "sglang") -> list[str]:
    return list(containers_of(pod)[name].get("args") or [])


def test_registry_and_declarations() -> None:
    assert isinstance(select_adapter("SGLang", "SGLangHiCache"), SGLangHiCacheAdapter)
    assert ADAPTER.supports_binding(None)
    for protocol in ("lm", "resp", "mooncakestore"):
        assert not ADAPTER.supports_binding(Binding(protocol, "x:1"))


def test_injects_enable_flag_and_ratio() -> None:
    out = inject(make_pod(engine(args=["--model-path", "m"])))
    assert args_of(out) == [
        "--model-path",
        "m",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "2.0",
    ]


def test_injects_size_and_optional_flags_only_when_set() -> None:
    cb = backend(
        sizeGB=64, writePolicy="write_through", ioBackend="kernel", memoryLayout="page_first"
    )
    assert args_of(inject(make_pod(engine()), cb)) == [
        "--enable-hierarchical-cache",
        "--hicache-size", "64",
        "--hicache-write-policy", "write_through",
        "--hicache-io-backend", "kernel",
        "--hicache-mem-layout", "page_first",
    ]  # fmt: skip


def test_optional_flags_absent_when_unset() -> None:
    args = args_of(inject(make_pod(engine()), backend(sizeGB=8)))
    for flag in (
        "--hicache-write-policy",
        "--hicache-io-backend",
        "--hicache-mem-layout",
        "--hicache-ratio",
    ):
        assert flag not in args


# ------------------------------------------------------ existing arguments


@pytest.mark.parametrize(
    "existing",
    [
        ["--hicache-ratio", "2.0"],
        ["--hicache-ratio=2.0"],
        ["--hicache-ratio", "2"],
        ["--enable-hierarchical-cache", "--hicache-ratio=2.00"],
    ],
)
def test_matching_existing_argument_is_kept_byte_for_byte(existing: list[str]) -> None:
    out = inject(make_pod(engine(args=existing)))
    args = args_of(out)
    assert args[: len(existing)] == existing
    assert args.count("--enable-hierarchical-cache") == 1
    assert sum(a.startswith("--hicache-ratio") for a in args) == 1


def test_matching_arguments_in_command_are_kept_there() -> None:
    command = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "2",
    ]
    pod = make_pod(engine(command=command))
    out = inject(pod)
    assert out == pod


def test_operator_optional_flag_not_set_by_backend_is_preserved() -> None:
    out = inject(make_pod(engine(args=["--hicache-write-policy=write_back"])))
    assert args_of(out)[0] == "--hicache-write-policy=write_back"


@pytest.mark.parametrize(
    ("existing", "match"),
    [
        (["--hicache-ratio", "3"], "wants"),
        (["--hicache-ratio=abc"], "wants"),
        (["--hicache-size", "64"], "capacity"),
        (["--hicache-ratio"], "without a value"),
        (["--hicache-ratio", "--port", "8000"], "without a value"),
        (["--hicache-ratio="], "without a value"),
        (["--hicache-ratio", "2", "--hicache-ratio", "2"], "more than once"),
        (["--enable-hierarchical-cache", "--enable-hierarchical-cache"], "more than once"),
        (["--enable-hierarchical-cache=true"], "boolean"),
        (
            ["--hicache-write-policy", "write_back", "--hicache-write-policy=write_back"],
            "more than once",
        ),
        (["--enable-lmcache"], "LMCache"),
        (["--lmcache-config-file", "/etc/lmcache/x.yaml"], "LMCache"),
    ],
)
def test_conflicting_malformed_or_duplicate_arguments_reject_without_partial_wiring(
    existing: list[str], match: str
) -> None:
    pod = make_pod(engine(args=existing))
    before = copy.deepcopy(pod)
    with pytest.raises(InjectionRejectedError, match=match):
        inject(pod)
    assert pod == before


def test_size_mode_rejects_existing_ratio() -> None:
    with pytest.raises(InjectionRejectedError, match="capacity"):
        inject(make_pod(engine(args=["--hicache-ratio", "2"])), backend(sizeGB=10))


def test_size_compared_numerically() -> None:
    pod = make_pod(engine(args=["--hicache-size", "064"]))
    assert args_of(inject(pod, backend(sizeGB=64)))[:2] == ["--hicache-size", "064"]


def test_different_enum_value_rejects() -> None:
    with pytest.raises(InjectionRejectedError):
        inject(
            make_pod(engine(args=["--hicache-io-backend", "direct"])),
            backend(ratio="2", ioBackend="kernel"),
        )


@pytest.mark.parametrize("hi", [{"ratio": "2", "sizeGB": 4}, {"ratio": "0"}, {"ratio": "nan"}])
def test_invalid_stored_capacity_is_rejected(hi: dict[str, Any]) -> None:
    cb = CacheBackend.model_validate(
        make_backend(runtime="SGLang", type_="SGLangHiCache", hiCache=hi)
    )
    with pytest.raises(InjectionRejectedError):
        inject(make_pod(engine()), cb)


def test_missing_hicache_block_is_rejected() -> None:
    cb = CacheBackend.model_validate(make_backend(runtime="SGLang", type_="SGLangHiCache"))
    with pytest.raises(InjectionRejectedError, match="hiCache"):
        inject(make_pod(engine()), cb)


# ----------------------------------------------------------- container rules


def test_one_container_pod_any_name() -> None:
    assert "--enable-hierarchical-cache" in args_of(inject(make_pod(engine("server"))), "server")


def test_multi_container_pod_must_name_engine_sglang() -> None:
    with pytest.raises(InjectionRejectedError, match="sglang"):
        inject(make_pod(engine("server"), make_container("proxy", image="envoy")))
    out = inject(make_pod(make_container("proxy", image="envoy"), engine()))
    assert "args" not in containers_of(out)["proxy"]


def test_shell_script_engine_needing_flags_is_rejected() -> None:
    with pytest.raises(InjectionRejectedError, match="shell"):
        inject(make_pod(engine(command=["sh", "-c", "python3 -m sglang.launch_server"])))


def test_no_volumes_shm_or_resources_are_added() -> None:
    pod = make_pod(engine())
    out = inject(pod)
    assert set(out["spec"]) == set(pod["spec"])
    assert set(containers_of(out)["sglang"]) == {"name", "image", "args"}


def test_repeat_injection_is_idempotent_and_input_untouched() -> None:
    cb = backend(ratio="1.5", writePolicy="write_back", memoryLayout="page_first")
    pod = make_pod(engine(args=["--model-path", "m"]))
    before = copy.deepcopy(pod)
    once = inject(pod, cb)
    assert pod == before
    assert inject(once, cb) == once
    assert_valid_pod(once)


def test_reserves_only_the_enable_flag() -> None:
    # Spec "Reserved declarations": an adapter guards "only the flags/env its own
    # integration cannot function without"; SGLang has defaults for every --hicache-*.
    assert ADAPTER.reserved_args == ("--enable-hierarchical-cache",)
    assert ADAPTER.reserved_env == ()


def overridden(args: list[str], **hi: Any) -> CacheBackend:
    raw = make_backend(
        runtime="SGLang",
        type_="SGLangHiCache",
        hiCache=hi or {"ratio": "2.0"},
        integration={"engineOverrides": {"args": args}},
    )
    return CacheBackend.model_validate(raw)


@pytest.mark.parametrize(
    ("existing", "override"),
    [
        (["--hicache-write-policy=write_back"], ["--hicache-write-policy=write_back"]),
        (["--hicache-write-policy", "write_back"], ["--hicache-write-policy", "write_back"]),
        (["--hicache-ratio", "4"], ["--hicache-ratio 4.0"]),
        (["--hicache-size=16"], ["--hicache-size=16"]),  # the opposite mode, by override
    ],
)
def test_an_engine_overrides_value_counts_as_matching(
    existing: list[str], override: list[str]
) -> None:
    # A re-admitted pod carries what engineOverrides put there: it converges.
    cb = overridden(override, ratio="2.0", writePolicy="write_through")
    pod = make_pod(engine(args=existing))
    out = inject(pod, cb)
    assert args_of(out)[: len(existing)] == existing


def test_a_value_neither_the_backend_nor_an_override_gives_still_rejects() -> None:
    cb = overridden(["--hicache-write-policy=write_back"], ratio="2.0", writePolicy="write_through")
    with pytest.raises(InjectionRejectedError):
        inject(make_pod(engine(args=["--hicache-write-policy", "write_through_selective"])), cb)
    with pytest.raises(InjectionRejectedError):
        inject(make_pod(engine(args=["--hicache-size", "8"])), cb)


@pytest.mark.parametrize("role", ["ReadOnly", "WriteOnly"])
def test_only_read_write_role_is_wired(role: str) -> None:
    """At the Pod webhook: a backend stored before reject_unsupported_hicache_role
    is not silently wired as ReadWrite (the rejection fails the pod open, unwired)."""
    cb = CacheBackend.model_validate(
        make_backend(
            runtime="SGLang",
            type_="SGLangHiCache",
            hiCache={"ratio": "2.0"},
            integration={"role": role},
        )
    )
    with pytest.raises(InjectionRejectedError, match="ReadWrite"):
        inject(make_pod(engine()), cb)
