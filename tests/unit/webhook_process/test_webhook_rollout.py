"""The install side of the drain: the webhook Deployment drains before it stops.

The kubelet runs preStop, then sends SIGTERM, then kills at terminationGracePeriodSeconds:
the preStop sleep, the webhook's drain and its wait for in-flight requests must fit.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from icache_install.manifests_cli import render_manifests
from tests.cli_helpers import paths_unchecked
from tests.samples import ROOT
from webhook_svc import webhook_cli


def _webhook_pod_spec() -> dict[str, Any]:
    (deployment,) = [
        d
        for d in render_manifests()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "inference-cache-webhook"
    ]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def _args(container: dict[str, Any]) -> argparse.Namespace:
    with pytest.MonkeyPatch.context() as patch:
        paths_unchecked(patch)  # the pod's mounted certificate is not here
        parser = argparse.ArgumentParser()
        webhook_cli.add_arguments(parser)
    return parser.parse_args(container["args"][1:])


def test_prestop_drain_and_inflight_wait_fit_the_grace_period() -> None:
    spec = _webhook_pod_spec()
    (container,) = spec["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    args = _args(container)
    assert pre_stop >= 1
    assert args.shutdown_drain_seconds >= 1
    total = pre_stop + args.shutdown_drain_seconds + args.shutdown_timeout_seconds
    assert total < spec["terminationGracePeriodSeconds"], total
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_image_has_the_sleep_the_prestop_runs() -> None:
    """The exec preStop needs /bin/sleep: the runtime base is Debian slim, not distroless."""
    dockerfile = (ROOT / "Dockerfile.webhook").read_text()
    runtime_base = re.findall(r"^FROM (\S+)", dockerfile, re.M)[-1]
    # The base is a build argument; its default is the image a plain build uses.
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)", dockerfile, re.M))
    runtime_base = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], runtime_base)
    assert re.match(r"python:[\d.]+-slim", runtime_base), runtime_base


def test_the_cli_drains_by_default() -> None:
    parser = argparse.ArgumentParser()
    webhook_cli.add_arguments(parser)
    args = parser.parse_args([])
    assert 1 <= args.shutdown_drain_seconds <= 10
    assert args.shutdown_timeout_seconds > 0
