"""Reading engine and cache-server pods: kernel-check verdicts, crash-loops, server pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.status.engine_pods import (
    CrashLoop,
    KernelCheckReport,
    ServerPod,
    crash_looping_engine_containers,
    kernel_check_report,
    observe_injected_pods,
    parse_kernel_check_verdict,
    server_pods,
)
from shared.backend_keys import injected_by_backend

CHECK = "lmcache-kernel-check"


def verdict(result: str, error: str = "", mode: str = "report-only") -> str:
    return json.dumps({"mode": mode, "result": result, "error": error}, sort_keys=True)


def engine_pod(
    name: str = "engine-0",
    *,
    injected: str | None = "ns/cb",
    uid: str | None = "cb-uid",
    mode: str | None = "report-only",
    check: bool = True,
    check_status: dict[str, Any] | None = None,
    containers: tuple[str, ...] = ("vllm",),
    statuses: list[dict[str, Any]] | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if injected is not None:
        annotations["inferencecache.io/injected-by"] = injected
    if uid is not None:
        annotations["inferencecache.io/injected-by-uid"] = uid
    if mode is not None and check:
        annotations["inferencecache.io/lmcache-kernel-check-mode"] = mode
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"pod-{name}",
        "annotations": annotations,
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": n, "image": "img"} for n in containers]}
    if check:
        spec["initContainers"] = [
            {
                "name": CHECK,
                "image": "img",
                "env": [{"name": "INFERENCECACHE_KERNEL_CHECK_MODE", "value": mode or "strict"}],
            }
        ]
    status: dict[str, Any] = {}
    if check_status is not None:
        status["initContainerStatuses"] = [{"name": CHECK, **check_status}]
    if statuses is not None:
        status["containerStatuses"] = statuses
    return {"metadata": meta, "spec": spec, "status": status}


def terminated(
    message: str | None, exit_code: int = 0, reason: str = "Completed"
) -> dict[str, Any]:
    t: dict[str, Any] = {"exitCode": exit_code, "reason": reason}
    if message is not None:
        t["message"] = message
    return t


# ------------------------------------------------------------------ injected-by


def test_injected_by_backend_needs_both_annotations_and_the_live_uid() -> None:
    assert injected_by_backend(engine_pod(), "ns", "cb", "cb-uid")
    assert not injected_by_backend(engine_pod(uid="other"), "ns", "cb", "cb-uid")
    assert not injected_by_backend(engine_pod(uid=None), "ns", "cb", "cb-uid")
    assert not injected_by_backend(engine_pod(injected="ns/other"), "ns", "cb", "cb-uid")
    assert not injected_by_backend(engine_pod(), "ns", "cb", None)


# ------------------------------------------------------------------ kernel check


def test_no_kernel_check_container_means_no_report() -> None:
    assert kernel_check_report(engine_pod(check=False)) is None


@pytest.mark.parametrize(
    "check_status",
    [
        None,  # not scheduled yet: no status at all
        {"state": {"waiting": {"reason": "PodInitializing"}}},
        {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
    ],
)
def test_kernel_check_not_finished_is_pending(check_status: dict[str, Any] | None) -> None:
    report = kernel_check_report(engine_pod(check_status=check_status))
    assert report == KernelCheckReport("engine-0", "report-only", "pending")


def test_kernel_check_ok() -> None:
    st = {"state": {"terminated": terminated(verdict("ok"))}}
    assert kernel_check_report(engine_pod(check_status=st)) == KernelCheckReport(
        "engine-0", "report-only", "ok"
    )


def test_kernel_check_failed_carries_the_error() -> None:
    error = "ImportError: libcudart.so.13: cannot open shared object file"
    st = {"state": {"terminated": terminated(verdict("failed", error))}}
    report = kernel_check_report(engine_pod(check_status=st))
    assert report is not None
    assert (report.state, report.detail) == ("failed", error)


def versioned_verdict(result: str, versions: Any, error: str = "") -> str:
    body = {"mode": "report-only", "result": result, "error": error, "versions": versions}
    return json.dumps(body, sort_keys=True)


@pytest.mark.parametrize("result", ["ok", "failed"])
def test_kernel_check_reads_the_reported_versions(result: str) -> None:
    """The verdict's versions (installed package metadata) come with the report, whatever
    the kernels' result."""
    versions = {"lmcache": "0.5.6", "vllm": "0.33.0", "torch": "2.9.0+cu128"}
    st = {"state": {"terminated": terminated(versioned_verdict(result, versions, "x"))}}
    report = kernel_check_report(engine_pod(check_status=st))
    assert report is not None
    assert report.versions == (("lmcache", "0.5.6"), ("torch", "2.9.0+cu128"), ("vllm", "0.33.0"))
    assert report.version("lmcache") == "0.5.6"


def test_a_verdict_from_before_versions_parses_with_none() -> None:
    """The field is additive: a verdict without it is still read as before."""
    st = {"state": {"terminated": terminated(verdict("ok"))}}
    report = kernel_check_report(engine_pod(check_status=st))
    assert report == KernelCheckReport("engine-0", "report-only", "ok")
    assert report.version("lmcache") is None


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({}, ()),  # nothing installed: a client pip-installed at engine start
        ("0.4.7", ()),
        (["lmcache"], ()),
        ({"lmcache": 47, "vllm": "", "torch": " 2.8.0 "}, (("torch", "2.8.0"),)),
        ({"lmcache": "0.4.7", "sglang": "0.5.13"}, (("lmcache", "0.4.7"),)),
    ],
    ids=["empty", "not-an-object", "a-list", "non-strings-and-blanks", "unknown-package"],
)
def test_malformed_versions_report_none_never_a_guess(versions: Any, expected: Any) -> None:
    st = {"state": {"terminated": terminated(versioned_verdict("ok", versions))}}
    report = kernel_check_report(engine_pod(check_status=st))
    assert report is not None
    assert report.state == "ok"
    assert report.versions == expected


def test_strict_failure_is_read_from_the_last_termination_while_crash_looping() -> None:
    # A strict check exits 1; the kubelet restarts it and it waits in CrashLoopBackOff.
    st = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {
            "terminated": terminated(verdict("failed", "no c_ops", "strict"), 1, "Error")
        },
        "restartCount": 3,
    }
    report = kernel_check_report(engine_pod(mode="strict", check_status=st))
    assert report == KernelCheckReport("engine-0", "strict", "failed", "no c_ops")


@pytest.mark.parametrize(
    ("message", "exit_code", "reason"),
    [
        (None, 0, "Completed"),  # no termination message at all
        ("", 137, "OOMKilled"),
        ("Traceback (most recent call last): boom", 1, "Error"),  # logs, no JSON
        (json.dumps({"mode": "strict", "result": "maybe"}), 0, "Completed"),
    ],
)
def test_kernel_check_without_a_recognised_result_is_an_error(
    message: str | None, exit_code: int, reason: str
) -> None:
    st = {"state": {"terminated": terminated(message, exit_code, reason)}}
    report = kernel_check_report(engine_pod(check_status=st))
    assert report is not None
    assert report.state == "error"
    assert f"exit code {exit_code}" in report.detail


def test_verdict_found_after_fallback_log_lines() -> None:
    text = "some warning\n" + verdict("ok") + "\n"
    assert parse_kernel_check_verdict(text) == {"error": "", "mode": "report-only", "result": "ok"}
    assert parse_kernel_check_verdict("[1, 2]") is None


def mode_of(pod: dict[str, Any]) -> str:
    report = kernel_check_report(pod)
    assert report is not None
    return report.mode


def test_mode_is_read_from_the_pod_annotation_then_the_check_env() -> None:
    st = {"state": {"terminated": terminated(verdict("failed", "x"))}}
    strict_env_only = engine_pod(mode=None, check_status=st)  # env defaults to strict here
    assert mode_of(strict_env_only) == "strict"
    pod = engine_pod(mode="report-only", check_status=st)
    # The annotation wins over the env; an unknown value never means strict.
    pod["spec"]["initContainers"][0]["env"][0]["value"] = "strict"
    assert mode_of(pod) == "report-only"
    pod["metadata"]["annotations"]["inferencecache.io/lmcache-kernel-check-mode"] = "STRICT "
    assert mode_of(pod) == "strict"
    pod["metadata"]["annotations"]["inferencecache.io/lmcache-kernel-check-mode"] = "strcit"
    assert mode_of(pod) == "report-only"


def test_long_errors_are_clipped_to_one_line() -> None:
    st = {"state": {"terminated": terminated(verdict("failed", "line\n" * 500))}}
    report = kernel_check_report(engine_pod(check_status=st))
    assert report is not None
    assert len(report.detail) <= 300
    assert "\n" not in report.detail


# ------------------------------------------------------------------ crash loops


def _cs(name: str, reason: str | None) -> dict[str, Any]:
    state = {"waiting": {"reason": reason}} if reason else {"running": {}}
    return {"name": name, "state": state, "restartCount": 4}


def test_crash_looping_engine_containers_exclude_the_subscriber() -> None:
    pod = engine_pod(
        containers=("vllm", "kvevent-subscriber", "proxy"),
        statuses=[
            _cs("vllm", "CrashLoopBackOff"),
            _cs("kvevent-subscriber", "CrashLoopBackOff"),
            _cs("proxy", None),
        ],
    )
    assert crash_looping_engine_containers(pod) == ("vllm",)
    pod = engine_pod(statuses=[_cs("vllm", "ImagePullBackOff")])
    assert crash_looping_engine_containers(pod) == ()


def test_observe_injected_pods_only_this_backend_sorted_and_live() -> None:
    ok = {"state": {"terminated": terminated(verdict("ok"))}}
    pods = [
        engine_pod("b", check_status=ok, statuses=[_cs("vllm", "CrashLoopBackOff")]),
        engine_pod("a", check_status=ok),
        engine_pod("c", uid="stale-uid", statuses=[_cs("vllm", "CrashLoopBackOff")]),
        engine_pod("d", injected=None, uid=None),
        engine_pod("e", terminating=True, statuses=[_cs("vllm", "CrashLoopBackOff")]),
        engine_pod("f", check=False),
    ]
    obs = observe_injected_pods(pods, "ns", "cb", "cb-uid")
    assert [r.pod for r in obs.kernel_checks] == ["a", "b"]
    assert obs.crash_loops == (CrashLoop("b", ("vllm",)),)


# ------------------------------------------------------------------ cache-server pods


def workload(selector: dict[str, str], containers: tuple[str, ...] = ("server",)) -> dict[str, Any]:
    return {
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"spec": {"containers": [{"name": n} for n in containers]}},
        }
    }


def server_pod(
    name: str, labels: dict[str, str], ready: bool, restarts: dict[str, int]
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {"name": n, "restartCount": count} for n, count in restarts.items()
            ],
        },
    }


def test_server_pods_select_by_workload_selector_and_sum_only_own_containers() -> None:
    sel = {"inferencecache.io/cachebackend": "cb", "app.kubernetes.io/name": "lmcache-server"}
    pods = [
        server_pod("s-2", {**sel, "pod-template-hash": "x"}, True, {"server": 2, "istio": 9}),
        server_pod("s-1", sel, False, {"server": 0}),
        server_pod("other", {"app": "x"}, True, {"server": 5}),
    ]
    obs = server_pods(pods, workload(sel))
    assert obs.pods == (
        ServerPod("s-1", "uid-s-1", False, 0),
        ServerPod("s-2", "uid-s-2", True, 2),
    )


def test_terminating_server_pod_is_not_ready() -> None:
    sel = {"app": "s"}
    pod = server_pod("s", sel, True, {"server": 0})
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert server_pods([pod], workload(sel)).pods[0].ready is False


def test_server_pods_need_a_selector() -> None:
    assert server_pods([server_pod("s", {}, True, {})], workload({})).pods == ()
