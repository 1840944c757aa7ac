"""Each long-running process's flags leave the parsed command line in one place,
`settings_from(args)`, as one frozen settings object its logic receives."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from icache_cli.main import build_parser
from reconciler.dispatch import dispatcher_cli
from reconciler.work import worker_cli
from webhook_svc import webhook_cli


def _parse(command: str, *argv: str) -> argparse.Namespace:
    parser, module, installed = build_parser(command)
    assert installed
    assert module is not None
    return parser.parse_args([command, *argv])


def test_dispatcher_settings_carry_every_flag() -> None:
    args = _parse(
        "dispatcher",
        "--redis-url=redis://r:6379/0",
        "--lease-duration=20",
        "--renew-deadline=12",
        "--retry-period=3",
        "--resync-period=7",
        "--watch-timeout=9",
        "--dispatch-timeout=11",
        "--lease-seconds=13",
        "--metrics-port=9100",
    )
    settings = dispatcher_cli.settings_from(args)
    assert settings.election.lease_duration == 20.0
    assert settings.election.renew_deadline == 12.0
    assert settings.election.retry_period == 3.0
    assert settings.watches.resync_period == 7.0
    assert settings.watches.watch_timeout == 9
    assert settings.dispatch_timeout == 11.0
    assert settings.common.lease_seconds == 13.0
    assert settings.common.metrics_port == 9100
    assert settings.common.redis_url.startswith("redis://r:6379/0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.dispatch_timeout = 1.0  # type: ignore[misc]


def test_worker_settings_fold_the_runtime_config() -> None:
    args = _parse(
        "worker",
        "--server-url=http://server:8080",
        "--probe-interval=5",
        "--reads=api",
        "--concurrency=3",
        "--pool=solo",
        "--snapshot-interval=4",
        "--queue-prefix=q",
        "--backoff-base=0.25",
        "--redis-timeout=6",
    )
    settings = worker_cli.settings_from(args)
    config = settings.runtime
    assert config.server_url == "http://server:8080"
    assert config.probe_window_seconds == 5.0
    assert config.reads == "api"
    assert config.queue.prefix == "q"
    assert config.queue.base_delay == 0.25
    assert config.redis_timeouts.connect == config.redis_timeouts.read == 6.0
    assert (settings.concurrency, settings.pool, settings.snapshot_interval) == (3, "solo", 4.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.pool = "threads"  # type: ignore[misc]


def test_webhook_settings_carry_every_flag(tmp_path: Path) -> None:
    """Every `icache webhook` destination reaches WebhookSettings, so serve() and the
    forked workers never read a flag from the Namespace."""
    args = _parse(
        "webhook",
        "--insecure",
        f"--backends-from={tmp_path}",
        "--port=9443",
        "--workers=2",
        "--shutdown-drain-seconds=1.5",
    )
    settings = webhook_cli.settings_from(args)
    assert {f.name for f in dataclasses.fields(settings)} == set(vars(args)) - {
        "command",
        "debug",
    }
    assert settings.backends_from == tmp_path
    assert (settings.port, settings.workers, settings.insecure) == (9443, 2, True)
    assert settings.shutdown_drain_seconds == 1.5
    assert webhook_cli.listen_host(settings) == "127.0.0.1"
