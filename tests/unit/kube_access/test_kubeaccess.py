"""One Kubernetes access layer, one fallback order.

``kubeio.access.load_configuration`` with real kubeconfig files, a real
ServiceAccount directory and the real environment (no network: loading a
configuration does not connect). Order: --kubeconfig, in-cluster, KUBECONFIG,
~/.kube/config; an absent source is skipped, a present but unusable one is an error
naming what was tried.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from urllib3 import Retry

from kubeio import access as kubeaccess
from kubeio.access import KubeConfigError, load_configuration
from kubeio.retries import RETRY_POLICY

ROOT = Path(__file__).resolve().parents[3]


def write_kubeconfig(path: Path, server: str, *, contexts: tuple[str, ...] = ("main",)) -> str:
    """A kubeconfig whose contexts point at ``server`` (context ``c`` at ``server/c``
    for every context but the first, so a test can tell which one was used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": c, "cluster": {"server": server if i == 0 else f"{server}/{c}"}}
            for i, c in enumerate(contexts)
        ],
        "users": [{"name": "u", "user": {"token": f"token-{path.stem}"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
        "current-context": contexts[0],
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing configured: not in a pod, no KUBECONFIG, an empty home."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return tmp_path


def in_cluster(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, ca: bool = True) -> Path:
    """A pod's environment: service env vars and a mounted ServiceAccount."""
    sa = tmp / "serviceaccount"
    sa.mkdir(exist_ok=True)
    (sa / "token").write_text("pod-token")
    if ca:
        (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return sa


def home_config(tmp: Path) -> str:
    return write_kubeconfig(tmp / "home" / ".kube" / "config", "https://home.example:6443")


def test_the_flag_wins_over_in_cluster_kubeconfig_env_and_home(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = in_cluster(env, monkeypatch)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(env / "env.yaml", "https://env.example"))
    home_config(env)
    flag = write_kubeconfig(env / "flag.yaml", "https://flag.example")
    loaded = load_configuration(flag, serviceaccount_dir=sa)
    assert loaded.configuration.host == "https://flag.example"
    assert loaded.source == f"--kubeconfig {flag}"
    assert loaded.configuration.api_key["BearerToken"] == "Bearer token-flag"


def test_in_cluster_comes_before_kubeconfig_env_and_home(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = in_cluster(env, monkeypatch)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(env / "env.yaml", "https://env.example"))
    home_config(env)
    loaded = load_configuration(serviceaccount_dir=sa)
    assert loaded.configuration.host == "https://10.96.0.1:443"
    assert loaded.source == "in-cluster ServiceAccount"
    assert loaded.configuration.api_key["BearerToken"] == "bearer pod-token"
    assert loaded.configuration.ssl_ca_cert == str(sa / "ca.crt")


def test_kubeconfig_env_comes_before_home_and_is_read_at_call_time(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The official client reads KUBECONFIG once, at import; this reads it per call."""
    home_config(env)
    path = write_kubeconfig(env / "env.yaml", "https://env.example")
    monkeypatch.setenv("KUBECONFIG", path)
    loaded = load_configuration(serviceaccount_dir=env / "no-sa")
    assert loaded.configuration.host == "https://env.example"
    assert loaded.source == f"KUBECONFIG={path}"


def test_home_kubeconfig_is_the_last_resort(env: Path) -> None:
    path = home_config(env)
    loaded = load_configuration(serviceaccount_dir=env / "no-sa")
    assert loaded.configuration.host == "https://home.example:6443"
    assert loaded.source == f"~/.kube/config ({path})"


def test_a_pod_without_a_mounted_token_falls_through_to_kubeconfig(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AutomountServiceAccountToken: false plus a mounted kubeconfig."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(env / "env.yaml", "https://env.example"))
    loaded = load_configuration(serviceaccount_dir=env / "no-sa")
    assert loaded.configuration.host == "https://env.example"


def test_nothing_found_names_every_source_tried_in_order(env: Path) -> None:
    with pytest.raises(KubeConfigError) as info:
        load_configuration(serviceaccount_dir=env / "no-sa")
    tried = info.value.tried
    assert [t.split(":")[0] for t in tried] == [
        "--kubeconfig",
        "in-cluster",
        "KUBECONFIG",
        "~/.kube/config",
    ]
    message = str(info.value)
    assert message.startswith("no Kubernetes configuration found (tried: --kubeconfig: not given")
    assert "KUBERNETES_SERVICE_HOST not set" in message
    assert str(env / "home" / ".kube" / "config") in message


def test_a_missing_flag_file_is_an_error_not_a_fallback(env: Path) -> None:
    home_config(env)
    missing = str(env / "nope.yaml")
    with pytest.raises(KubeConfigError, match=rf"--kubeconfig {missing}: .* does not exist"):
        load_configuration(missing, serviceaccount_dir=env / "no-sa")


def test_kubeconfig_env_naming_no_file_is_an_error_not_home(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The home kubeconfig may be another cluster: a set KUBECONFIG is the intent."""
    home_config(env)
    monkeypatch.setenv("KUBECONFIG", str(env / "gone.yaml"))
    with pytest.raises(KubeConfigError) as info:
        load_configuration(serviceaccount_dir=env / "no-sa")
    assert "none of its files exists" in str(info.value)
    assert info.value.tried == [
        "--kubeconfig: not given",
        "in-cluster: KUBERNETES_SERVICE_HOST not set (not in a pod)",
    ]


def test_kubeconfig_env_lists_files_as_kubectl_does(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several paths: the missing ones are skipped, the rest merged."""
    real = write_kubeconfig(env / "real.yaml", "https://real.example")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(env / "gone.yaml"), real]))
    loaded = load_configuration(serviceaccount_dir=env / "no-sa")
    assert loaded.configuration.host == "https://real.example"


def test_a_broken_kubeconfig_is_an_error_naming_its_source(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = env / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: missing\n")
    monkeypatch.setenv("KUBECONFIG", str(bad))
    with pytest.raises(KubeConfigError, match=rf"KUBECONFIG={bad}: "):
        load_configuration(serviceaccount_dir=env / "no-sa")


def test_a_pod_with_a_token_but_no_ca_is_an_error(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = in_cluster(env, monkeypatch, ca=False)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(env / "env.yaml", "https://env.example"))
    with pytest.raises(KubeConfigError, match=r"in-cluster ServiceAccount: .*certification"):
        load_configuration(serviceaccount_dir=sa)


def test_a_context_selects_it_and_skips_in_cluster(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = in_cluster(env, monkeypatch)
    path = write_kubeconfig(env / "env.yaml", "https://env.example", contexts=("main", "other"))
    monkeypatch.setenv("KUBECONFIG", path)
    loaded = load_configuration(context="other", serviceaccount_dir=sa)
    assert loaded.configuration.host == "https://env.example/other"


def test_every_connection_gets_the_same_retries(env: Path) -> None:
    """Rule: every loaded configuration carries the access layer's transport retries
    (RETRY_POLICY), with no Retry-After rule of urllib3's own."""
    home_config(env)
    loaded = load_configuration(serviceaccount_dir=env / "no-sa")
    retries = loaded.configuration.retries
    assert isinstance(retries, Retry)
    assert retries.total == RETRY_POLICY.connection_retries
    assert not retries.respect_retry_after_header


@pytest.mark.parametrize("command", ["dispatcher", "worker", "webhook", "certs"])
@pytest.mark.services
def test_each_process_says_what_it_tried_instead_of_a_traceback(env: Path, command: str) -> None:
    """Every process connects through kubeio.access and fails the same way: one
    line, exit code 2 (a configuration problem, like any other bad input)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG")
    }
    clean["HOME"] = str(env / "home")
    extra = ["--insecure"] if command == "webhook" else []
    result = subprocess.run(
        [sys.executable, "-m", "icache_cli.main", command, *extra],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "no Kubernetes configuration found (tried: --kubeconfig: not given" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("just a string\n", "a YAML mapping was expected, found str"),
        ("- a\n- list\n", "a YAML mapping was expected, found list"),
        ("", "the file is empty"),
        ("a: [\n", "not YAML"),
    ],
)
def test_a_kubeconfig_that_cannot_be_one_is_named_in_words(tmp_path, text, said):
    """A broken --kubeconfig is one line saying what is wrong, not the client's TypeError."""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(kubeaccess.KubeConfigError) as caught:
        kubeaccess.load_configuration(str(path))
    message = str(caught.value)
    assert said in message
    assert "TypeError" not in message
    assert "\n" not in message
