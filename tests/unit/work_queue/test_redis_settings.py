"""Redis authentication by default: the Redis URL the dispatcher and worker connect
with — the password from the install's Secret (env ICACHE_REDIS_PASSWORD) joined to
the ConfigMap's URL, and certificate verification on by default for rediss://."""

from __future__ import annotations

import argparse

import pytest

from reconciler.cli_common import add_common_arguments
from reconciler.queue.redis_settings import check_url, redis_url, with_password, with_tls_defaults


def test_with_password_fills_in_a_missing_password_only() -> None:
    assert with_password("redis://redis:6379/0", "s3cret") == "redis://:s3cret@redis:6379/0"
    assert with_password("redis://redis:6379/0", "") == "redis://redis:6379/0"
    assert with_password("redis://redis:6379/0", None) == "redis://redis:6379/0"
    # A password already in the URL wins.
    assert with_password("redis://:mine@redis:6379/0", "s3cret") == "redis://:mine@redis:6379/0"
    # An ACL user is kept; odd characters are quoted (redis-py and kombu unquote).
    assert (
        with_password("redis://cache-user@redis:6379/3", "p@ss:w/rd")
        == "redis://cache-user:p%40ss%3Aw%2Frd@redis:6379/3"
    )


def test_rediss_verifies_the_server_certificate_unless_told_otherwise() -> None:
    assert (
        with_tls_defaults("rediss://redis:6380/0") == "rediss://redis:6380/0?ssl_cert_reqs=required"
    )
    assert (
        with_tls_defaults("rediss://redis:6380/0?ssl_ca_certs=%2Fetc%2Fca.crt")
        == "rediss://redis:6380/0?ssl_ca_certs=%2Fetc%2Fca.crt&ssl_cert_reqs=required"
    )
    explicit = "rediss://redis:6380/0?ssl_cert_reqs=none"
    assert with_tls_defaults(explicit) == explicit
    assert with_tls_defaults("redis://redis:6379/0") == "redis://redis:6379/0"


def test_redis_url_joins_both_and_is_idempotent() -> None:
    url = redis_url("rediss://redis:6380/0", "pw")
    assert url == "rediss://:pw@redis:6380/0?ssl_cert_reqs=required"
    assert redis_url(url, "pw") == url


def test_the_process_flag_takes_the_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The type applies to the URL from the environment (ICACHE_REDIS_URL, through
    `icache`'s environment binding) and to an explicit --redis-url."""
    from icache_cli.main import build_parser

    monkeypatch.setenv("ICACHE_REDIS_URL", "redis://inference-cache-redis:6379/0")
    monkeypatch.setenv("ICACHE_REDIS_PASSWORD", "from-secret")
    for command in ("dispatcher", "worker"):
        parser, _, _ = build_parser(command)
        from_env = parser.parse_args([command]).redis_url
        assert from_env == "redis://:from-secret@inference-cache-redis:6379/0"
        explicit = parser.parse_args([command, "--redis-url", "redis://127.0.0.1:1/2"])
        assert explicit.redis_url == "redis://:from-secret@127.0.0.1:1/2"
    # The help shows the default URL, never a password from the environment.
    plain = argparse.ArgumentParser()
    add_common_arguments(plain)
    assert "from-secret" not in plain.format_help()


def test_celery_gets_verified_tls_from_a_bare_rediss_url() -> None:
    """kombu alone would fall back to CERT_NONE for a bare rediss:// URL, and Celery's
    Redis backend refuses one; with the default added both verify."""
    import ssl

    from reconciler.queue.celery_app import make_app

    app = make_app(redis_url("rediss://redis.example:6380/0", "pw"))
    assert app.connection_for_write().ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert app.backend.connparams["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert app.backend.connparams["password"] == "pw"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://redis",
        "rediss://user:pw@redis.example:6380/15?ssl_cert_reqs=none",
        "redis://redis:6379/?db=2",
        "unix:///run/redis.sock?db=1",
    ],
)
def test_a_redis_url_redis_py_accepts_passes(url: str) -> None:
    check_url(url)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("notaurl", "the scheme must be redis://, rediss:// or unix://"),
        ("http://redis:6379/0", "the scheme must be redis://, rediss:// or unix://"),
        ("redis://redis:port/0", "the port must be a number"),
        ("redis://redis:99999/0", "the port must be a number"),
        ("redis://redis:6379/x", "the database must be a number"),
        ("redis://redis:6379/0/1", "the database must be a number"),
        ("redis://redis:6379/?db=one", "the database must be a number"),
        ("unix://", "a unix:// URL needs the socket's path"),
    ],
)
def test_a_bad_redis_url_says_what_is_wrong(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        check_url(url)


def test_a_bad_redis_url_never_shows_its_password() -> None:
    with pytest.raises(ValueError, match="the database must be a number") as info:
        redis_url("redis://:s3cret@redis:6379/x")
    assert "s3cret" not in str(info.value)
    assert "redis://:***@redis:6379/x" in str(info.value)
