"""Every subcommand, fed bad input the way a new user would: one line on stderr saying
what and where, exit code 2, nothing on stdout, and never a traceback."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from icache_cli.main import SUBCOMMANDS
from icache_install import certs

NOPE = "/nonexistent/icache-test"
BROKEN_YAML = "a: [\n b: c\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad-input")
    broken = d / "broken.yaml"
    broken.write_text(BROKEN_YAML)
    junk = d / "junk.pem"
    junk.write_text("not a certificate\n")
    # PEM markers around no certificate or key: passes the marker check, not a TLS load.
    garbage_cert = d / "garbage-cert.pem"
    garbage_cert.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    garbage_key = d / "garbage-key.pem"
    garbage_key.write_text("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    now = dt.datetime.now(dt.UTC)
    ca = certs.new_ca(now)
    pairs = {}
    for n in ("1", "2"):
        serving = certs.issue_serving(ca, ["127.0.0.1"], now)
        (d / f"cert{n}.pem").write_bytes(serving.cert_pem)
        (d / f"key{n}.pem").write_bytes(serving.key_pem)
        pairs[f"cert{n}"] = str(d / f"cert{n}.pem")
        pairs[f"key{n}"] = str(d / f"key{n}.pem")
    empty = tmp_path_factory.mktemp("empty")
    # Kubeconfigs that parse but cannot work: a server without a scheme, a missing
    # exec credential plugin.
    kubeconfigs = {
        "kc_noscheme": ("{server: notaurl}", "{token: abc}"),
        "kc_exec": (
            '{server: "https://127.0.0.1:1"}',
            "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
            "command: icache-no-such-plugin}}",
        ),
    }
    made = {}
    for name, (cluster, user) in kubeconfigs.items():
        path = d / f"{name}.kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {cluster}}}]\n"
            f"users: [{{name: u, user: {user}}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        )
        made[name] = str(path)
    # Manifests of the right kind but the wrong shape, and a YAML alias inside itself.
    container = "spec: {containers: [{name: a, image: b}]}\n"
    shapes = {
        "meta_list": f"apiVersion: v1\nkind: Pod\nmetadata: [1]\n{container}",
        "tmpl_meta": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
        f"spec:\n  template:\n    metadata: 5\n    {container}",
        "annotations": f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: 5}}\n{container}",
        "labels": f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p, labels: [a]}}\n{container}",
        "loop": f"apiVersion: v1\nkind: Pod\nmetadata: &m\n  name: p\n  labels: *m\n{container}",
        "loop_cb": "apiVersion: inferencecache.io/v1alpha1\nkind: CacheBackend\n"
        "metadata: &m {name: c, labels: *m}\nspec: {runtime: VLLM}\n",
    }
    shaped = {}
    for name, text in shapes.items():
        (d / "shapes").mkdir(exist_ok=True)
        path = d / "shapes" / f"{name}.yaml"
        path.write_text(text)
        shaped[name] = str(path)
    loop_dir = tmp_path_factory.mktemp("loop-backends")
    (loop_dir / "cb.yaml").write_text(shapes["loop_cb"])
    shaped["loop_dir"] = str(loop_dir)
    return {
        "broken": str(broken),
        "junk": str(junk),
        "dir": str(d),
        "empty": str(empty),
        "garbage_cert": str(garbage_cert),
        "garbage_key": str(garbage_key),
        **pairs,
        **shaped,
        **made,
    }


# What a subcommand requires before it can get as far as an unknown flag.
REQUIRED = {
    "admit-pod": ["-f", "{dir}", "--backends-from", "{dir}"],
    "validate": ["-f", "{dir}"],
    "completion": ["bash"],
}
CASES: list[tuple[str, list[str], str]] = [
    # (name, argv after `icache`, words the one line must contain)
    *[
        (
            f"{name}-unknown-flag",
            [name, *REQUIRED.get(name, []), "--no-such-flag"],
            "unrecognized arguments: --no-such-flag",
        )
        for name in SUBCOMMANDS
    ],
    ("webhook-no-tls", ["webhook"], "--tls-cert-file and --tls-key-file are required"),
    ("no-subcommand", [], "required: COMMAND"),
    # A subcommand's flag given before the subcommand: named, with where it goes.
    (
        "flag-before-subcommand",
        ["--log-level", "LOUD", "webhook"],
        "--log-level is a flag of 'icache webhook': give it after the subcommand "
        "(icache webhook --log-level ...)",
    ),
    (
        "flag-with-value-before-subcommand",
        ["--kubeconfig=x", "doctor"],
        "--kubeconfig is a flag of 'icache doctor': give it after the subcommand",
    ),
    (
        "unknown-flag-before-subcommand",
        ["--loud", "crd"],
        "--loud is not a flag of icache or of 'icache crd'",
    ),
    (
        "flag-without-subcommand",
        ["--log-level", "debug"],
        "--log-level is not a flag of icache; a subcommand's flags go after it",
    ),
    ("unknown-subcommand", ["frobnicate"], "invalid choice: 'frobnicate'"),
    (
        "webhook-missing-cert",
        ["webhook", "--tls-cert-file", NOPE, "--tls-key-file", NOPE, "--workers", "2"],
        f"{NOPE}: no such file",
    ),
    ("webhook-junk-cert", ["webhook", "--tls-cert-file", "{junk}"], "no PEM certificate"),
    ("webhook-junk-key", ["webhook", "--tls-key-file", "{junk}"], "no PEM private key"),
    # The pair is loaded once, by the parent, before it forks its workers.
    (
        "webhook-mismatched-pair",
        [
            "webhook",
            "--tls-cert-file",
            "{cert1}",
            "--tls-key-file",
            "{key2}",
            "--workers",
            "2",
            "--backends-from",
            "{empty}",
        ],
        "--tls-key-file {key2} does not match --tls-cert-file {cert1}",
    ),
    (
        "webhook-garbage-cert",
        [
            "webhook",
            "--tls-cert-file",
            "{garbage_cert}",
            "--tls-key-file",
            "{key1}",
            "--workers",
            "2",
            "--backends-from",
            "{empty}",
        ],
        "--tls-cert-file {garbage_cert}: not a PEM certificate",
    ),
    (
        "webhook-garbage-key",
        [
            "webhook",
            "--tls-cert-file",
            "{cert1}",
            "--tls-key-file",
            "{garbage_key}",
            "--backends-from",
            "{empty}",
        ],
        "--tls-key-file {garbage_key}: not a PEM private key",
    ),
    # Embedded mode refuses a file it cannot parse at start, rather than serve without it.
    (
        "webhook-broken-backends",
        ["webhook", "--insecure", "--backends-from", "{dir}"],
        "--backends-from {dir}: {broken}",
    ),
    (
        "webhook-host",
        ["webhook", "--insecure", "--host", "not an ip", "--backends-from", "{empty}"],
        "--host 'not an ip': not an address this machine can listen on",
    ),
    ("webhook-log-level", ["webhook", "--insecure", "--log-level", "LOUD"], "invalid log level"),
    ("webhook-port", ["webhook", "--port", "99999"], "not a port"),
    ("webhook-workers", ["webhook", "--workers", "-1"], "must not be negative"),
    (
        "webhook-backends-dir",
        ["webhook", "--insecure", "--backends-from", NOPE],
        "no such directory",
    ),
    ("webhook-kubeconfig", ["webhook", "--insecure", "--kubeconfig", NOPE], "does not exist"),
    (
        "webhook-broken-kubeconfig",
        ["webhook", "--insecure", "--kubeconfig", "{broken}"],
        "ParserError",
    ),
    ("dispatcher-log-level", ["dispatcher", "--log-level", "LOUD"], "invalid log level"),
    ("dispatcher-number", ["dispatcher", "--lease-duration", "abc"], "is not a number"),
    ("dispatcher-kubeconfig", ["dispatcher", "--kubeconfig", "{broken}"], "ParserError"),
    (
        "dispatcher-lease-namespace",
        ["dispatcher", "--lease-namespace", "Bad_NS"],
        "invalid namespace",
    ),
    (
        "dispatcher-redis-url",
        ["dispatcher", "--redis-url", "notaurl"],
        "argument --redis-url: 'notaurl' is not a Redis URL: the scheme must be redis://, "
        "rediss:// or unix://",
    ),
    (
        "worker-redis-db",
        ["worker", "--redis-url", "redis://:s3cret@redis:6379/cache"],
        "argument --redis-url: 'redis://:***@redis:6379/cache': the database must be a number",
    ),
    (
        "worker-redis-port",
        ["worker", "--redis-url", "redis://redis:http/0"],
        "argument --redis-url: 'redis://redis:http/0': the port must be a number",
    ),
    (
        "worker-server-url",
        ["worker", "--server-url", "notaurl"],
        "argument --server-url: 'notaurl' is not an http:// or https:// URL",
    ),
    (
        "dispatcher-renew-deadline",
        ["dispatcher", "--renew-deadline", "20", "--lease-duration", "15"],
        "--renew-deadline (20s) must be shorter than --lease-duration (15s)",
    ),
    (
        "dispatcher-retry-period",
        ["dispatcher", "--retry-period", "10"],
        "--retry-period (10s) must be shorter than --renew-deadline (10s)",
    ),
    ("worker-concurrency", ["worker", "--concurrency", "0"], "must be at least 1"),
    ("worker-pool", ["worker", "--pool", "gevent"], "invalid choice: 'gevent'"),
    ("worker-kubeconfig", ["worker", "--kubeconfig", NOPE], "does not exist"),
    ("certs-broken-kubeconfig", ["certs", "--kubeconfig", "{broken}"], "ParserError"),
    (
        "doctor-kubeconfig-no-scheme",
        ["doctor", "--kubeconfig", "{kc_noscheme}"],
        "--kubeconfig {kc_noscheme}: the cluster's server 'notaurl' is not an http:// or "
        "https:// URL",
    ),
    (
        "certs-kubeconfig-no-scheme",
        ["certs", "--kubeconfig", "{kc_noscheme}"],
        "the cluster's server 'notaurl' is not an http:// or https:// URL",
    ),
    (
        "doctor-kubeconfig-exec-plugin",
        ["doctor", "--kubeconfig", "{kc_exec}"],
        "--kubeconfig {kc_exec}: the user's exec credential plugin failed: [Errno 2] No such "
        "file or directory: 'icache-no-such-plugin'",
    ),
    (
        "certs-kubeconfig-dir",
        ["certs", "--kubeconfig", "{dir}"],
        "--kubeconfig {dir}: {dir} is a directory, not a kubeconfig file",
    ),
    (
        "manifests-dir-without-rendered",
        ["manifests", "--manifests-dir", "{empty}"],
        "--manifests-dir {empty}: no rendered manifests in it (rendered/install.yaml)",
    ),
    ("certs-days", ["certs", "--days", "0"], "must be at least 1"),
    ("certs-url-base", ["certs", "--url-base", "http://127.0.0.1:1"], "must use https"),
    ("certs-namespace", ["certs", "--namespace", "Bad_NS"], "invalid namespace"),
    ("manifests-namespace", ["manifests", "--namespace", "Bad_NS"], "invalid namespace"),
    ("manifests-tag", ["manifests", "--image-tag", "bad tag"], "invalid image tag"),
    ("manifests-dir", ["manifests", "--manifests-dir", NOPE], "no such directory"),
    ("manifests-variant", ["manifests", "--variant", "helm"], "invalid choice"),
    (
        "admit-pod-missing",
        ["admit-pod", "-f", NOPE, "--backends-from", "{dir}"],
        "no such file or directory",
    ),
    (
        "admit-pod-broken",
        ["admit-pod", "-f", "{broken}", "--backends-from", "{dir}"],
        "{broken}: not YAML: expected ',' or ']', but got '<stream end>' at line 3, column 1",
    ),
    (
        "admit-pod-backends",
        ["admit-pod", "-f", "{broken}", "--backends-from", NOPE],
        "no such directory",
    ),
    (
        "admit-pod-broken-backends",
        ["admit-pod", "-f", "{meta_list}", "--backends-from", "{dir}"],
        "{broken}: not YAML: expected ',' or ']', but got '<stream end>' at line 3, column 1",
    ),
    (
        "admit-pod-metadata-list",
        ["admit-pod", "-f", "{meta_list}", "--backends-from", "{empty}"],
        "{meta_list}, document 1: metadata must be a mapping, not a list",
    ),
    (
        "admit-pod-template-metadata",
        ["admit-pod", "-f", "{tmpl_meta}", "--backends-from", "{empty}"],
        "{tmpl_meta}, document 1: spec.template.metadata must be a mapping, not an integer",
    ),
    (
        "admit-pod-annotations",
        ["admit-pod", "-f", "{annotations}", "--backends-from", "{empty}"],
        "{annotations}, document 1: metadata.annotations must be a mapping, not an integer",
    ),
    (
        "admit-pod-labels",
        ["admit-pod", "-f", "{labels}", "--backends-from", "{empty}"],
        "{labels}, document 1: metadata.labels must be a mapping, not a list",
    ),
    (
        "admit-pod-alias-loop",
        ["admit-pod", "-f", "{loop}", "--backends-from", "{empty}"],
        "{loop}, document 1: a YAML alias refers to a node that contains it",
    ),
    (
        "admit-pod-backends-alias-loop",
        ["admit-pod", "-f", "{annotations}", "--backends-from", "{loop_dir}"],
        "{loop_dir}/cb.yaml, document 1: a YAML alias refers to a node that contains it",
    ),
    (
        "validate-alias-loop",
        ["validate", "-f", "{loop_cb}"],
        "{loop_cb}, document 1: a YAML alias refers to a node that contains it",
    ),
    ("validate-missing", ["validate", "-f", NOPE], "no such file or directory"),
    ("validate-broken", ["validate", "-f", "{broken}"], "not YAML"),
    ("validate-old", ["validate", "-f", "{dir}", "--old", NOPE], "no such file or directory"),
    ("validate-output", ["validate", "-f", "{dir}", "-o", "xml"], "invalid choice: 'xml'"),
    ("doctor-kubeconfig", ["doctor", "--kubeconfig", NOPE], "does not exist"),
    ("doctor-broken-kubeconfig", ["doctor", "--kubeconfig", "{broken}"], "ParserError"),
    ("doctor-namespace", ["doctor", "-n", "Bad_NS"], "invalid namespace"),
    ("doctor-both-scopes", ["doctor", "-n", "a", "-A"], "not allowed with argument"),
    ("doctor-prometheus-url", ["doctor", "--prometheus", "prometheus:9090"], "--prometheus"),
    ("completion-shell", ["completion", "tcsh"], "invalid choice: 'tcsh'"),
    ("crd-positional", ["crd", "extra"], "unrecognized arguments: extra"),
]


@pytest.mark.parametrize(
    ("argv", "words"), [(a, w) for _, a, w in CASES], ids=[n for n, _, _ in CASES]
)
@pytest.mark.services
def test_bad_input_is_one_line_and_exit_2(
    files: dict[str, str], tmp_path: Path, argv: list[str], words: str
) -> None:
    args = [a.format(**files) for a in argv]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "icache_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert words.format(**files) in lines[0], lines[0]
    assert done.stdout == ""


def test_every_subcommand_has_an_unknown_flag_case() -> None:
    named = {n.removesuffix("-unknown-flag") for n, _, _ in CASES if n.endswith("-unknown-flag")}
    assert named == set(SUBCOMMANDS)


@pytest.mark.parametrize("command", ["dispatcher", "worker"])
@pytest.mark.services
def test_a_bad_redis_url_in_the_environment_names_the_variable(
    tmp_path: Path, command: str
) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ICACHE_REDIS_URL": "notaurl"}
    done = subprocess.run(
        [sys.executable, "-m", "icache_cli.main", command],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert "environment variable ICACHE_REDIS_URL='notaurl'" in line
    assert "not a Redis URL" in line


UNREACHABLE = (
    "apiVersion: v1\nkind: Config\n"
    'clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\n'
    "users: [{name: u, user: {token: abc}}]\n"
    "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
)


@pytest.mark.parametrize("command", ["doctor", "certs"])
@pytest.mark.services
def test_an_unreachable_api_server_is_one_line_and_exit_1(tmp_path: Path, command: str) -> None:
    """A run-time failure: no client-library warnings or retry lines, one error line."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "icache_cli.main", command, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert not [line for line in lines if "urllib3" in line or "Retrying" in line], lines
    errors = [line for line in lines if "error" in line.lower()]
    assert len(errors) == 1, lines
    assert "cannot reach https://127.0.0.1:1: [Errno 111] Connection refused" in errors[0]
    assert errors[0] == lines[-1]
