"""`icache admit-pod` (offline dry run) and the CacheBackend file loader it shares with the webhook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from icache_cli.main import main
from shared import constants as c
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from webhook_svc.backend_files import BackendFileError, load_backends

SUB = "ghcr.io/inference-cache/kvevent-subscriber:v1"


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def deployment(
    namespace: str | None = "team-a", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "llm"}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "engine"}},
            "template": {
                "metadata": {"labels": labels or {"app": "engine"}},
                "spec": {"containers": [make_container(args=["--model", "m"])]},
            },
        },
    }


@pytest.fixture
def backends_dir(tmp_path: Path) -> Path:
    d = tmp_path / "backends"
    managed = make_backend(
        "cache",
        namespace="team-a",
        remote={"provider": "LMCacheServer", "ownership": "Managed"},
        status_endpoint="cache-lmcache-server.team-a.svc:65432",
    )
    write(
        d / "cache.yaml",
        managed,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
    )
    return d


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["admit-pod", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- the loader


def test_load_backends_keeps_cache_backends_only_and_honours_status(backends_dir: Path) -> None:
    (backend,) = load_backends(backends_dir)
    assert backend["metadata"]["name"] == "cache"
    assert backend["status"]["endpoint"] == "cache-lmcache-server.team-a.svc:65432"


def test_load_backends_reads_nested_dirs_json_and_lists(tmp_path: Path) -> None:
    write(tmp_path / "a" / "one.yml", make_backend("one"))
    (tmp_path / "two.json").write_text(json.dumps(make_backend("two")))
    write(
        tmp_path / "list.yaml",
        {"apiVersion": "v1", "kind": "List", "items": [make_backend("three")]},
    )
    (tmp_path / "notes.txt").write_text("kind: CacheBackend")
    names = sorted(b["metadata"]["name"] for b in load_backends(tmp_path))
    assert names == ["one", "three", "two"]


def test_load_backends_ignores_other_groups(tmp_path: Path) -> None:
    other = make_backend("foreign")
    other["apiVersion"] = "example.com/v1"
    write(tmp_path / "x.yaml", other)
    assert load_backends(tmp_path) == []


def test_load_backends_defaults_namespace(tmp_path: Path) -> None:
    backend = make_backend("plain")
    del backend["metadata"]["namespace"]
    write(tmp_path / "x.yaml", backend)
    assert load_backends(tmp_path)[0]["metadata"]["namespace"] == "default"
    assert load_backends(tmp_path, default_namespace="ml")[0]["metadata"]["namespace"] == "ml"


def test_load_backends_reads_yaml_1_2_booleans_and_string_timestamps(tmp_path: Path) -> None:
    # An unquoted `off` (a kernel-check mode) or `yes` (a label value) stays a string.
    (tmp_path / "cb.yaml").write_text(
        """\
apiVersion: inferencecache.io/v1alpha1
kind: CacheBackend
metadata:
  name: a
  creationTimestamp: 2026-01-01T00:00:00Z
  annotations:
    inferencecache.io/lmcache-kernel-check: off
spec:
  runtime: VLLM
  engineSelector: {matchLabels: {gpu: yes}}
  integration: {failOpen: false}
"""
    )
    (doc,) = load_backends(tmp_path)
    assert doc["metadata"]["annotations"] == {c.ANNOTATION_LMCACHE_KERNEL_CHECK: "off"}
    assert doc["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert doc["spec"]["engineSelector"]["matchLabels"] == {"gpu": "yes"}
    assert doc["spec"]["integration"]["failOpen"] is False


def test_load_backends_unpacks_typed_lists_and_sequences(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "inferencecache.io/v1alpha1",
                "kind": "CacheBackendList",
                "items": [make_backend("a")],
            }
        )
    )
    (tmp_path / "seq.yaml").write_text(yaml.safe_dump([make_backend("b")]))
    nameless = make_backend("c")
    nameless["metadata"] = None
    write(tmp_path / "z.yaml", nameless)
    docs = load_backends(tmp_path)
    assert [d["metadata"].get("name") for d in docs] == ["a", "b", None]
    assert docs[2]["metadata"] == {"namespace": "default"}


def test_load_backends_bad_yaml_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [unclosed")
    with pytest.raises(BackendFileError, match=r"bad\.yaml"):
        load_backends(tmp_path)


def test_load_backends_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BackendFileError):
        load_backends(tmp_path / "nope")


# -------------------------------------------------------------- admit-pod


def test_admit_deployment_prints_the_wired_pod(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "deploy.yaml", deployment())
    code, out, err = run(
        capsys,
        "-f",
        str(manifest),
        "--backends-from",
        str(backends_dir),
        "--kvevent-subscriber-image",
        SUB,
    )
    assert code == 0
    pod = yaml.safe_load(out)
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["namespace"] == "team-a"
    assert pod["metadata"]["generateName"] == "llm-"
    assert pod["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY] == "team-a/cache"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["LMCACHE_REMOTE_URL"] == "lm://cache-lmcache-server.team-a.svc:65432"
    assert [ct["name"] for ct in pod["spec"]["containers"]] == ["vllm", "kvevent-subscriber"]
    assert "outcome=injected reason=injected backend=team-a/cache" in err


def test_admit_patch_output_applies_to_the_pod(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {"app": "engine"}},
        "spec": {"containers": [make_container()]},
    }
    manifest = write(tmp_path / "pod.yaml", pod)
    code, out, _ = run(
        capsys, "-f", str(manifest), "--backends-from", str(backends_dir), "-o", "patch"
    )
    assert code == 0
    wired = jsonpatch.apply_patch(pod, json.loads(out))
    assert wired["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY] == "team-a/cache"


def test_admit_workload_output_keeps_the_workload_shape(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "deploy.yaml", deployment())
    code, out, _ = run(
        capsys, "-f", str(manifest), "--backends-from", str(backends_dir), "-o", "workload"
    )
    assert code == 0
    workload = yaml.safe_load(out)
    assert workload["kind"] == "Deployment"
    assert workload["spec"]["replicas"] == 2
    template = workload["spec"]["template"]
    assert "namespace" not in template["metadata"]
    assert template["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY] == "team-a/cache"
    assert "--kv-transfer-config" in template["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("kind", ["StatefulSet", "ReplicaSet", "DaemonSet", "Job"])
def test_admit_other_workload_kinds(
    kind: str, tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = deployment()
    doc["kind"] = kind
    manifest = write(tmp_path / "w.yaml", doc)
    code, _, err = run(capsys, "-f", str(manifest), "--backends-from", str(backends_dir))
    assert code == 0
    assert "outcome=injected" in err


def test_admit_namespace_flag_when_manifest_has_none(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "d.yaml", deployment(namespace=None))
    _, _, err = run(capsys, "-f", str(manifest), "--backends-from", str(backends_dir))
    assert "reason=no_match" in err  # default namespace has no backend
    _, out, err = run(
        capsys, "-f", str(manifest), "--backends-from", str(backends_dir), "-n", "team-a"
    )
    assert "outcome=injected" in err
    assert yaml.safe_load(out)["metadata"]["namespace"] == "team-a"


def test_admit_fail_open_prints_the_unwired_pod(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "d.yaml", deployment(labels={"app": "web"}))
    code, out, err = run(capsys, "-f", str(manifest), "--backends-from", str(backends_dir))
    assert code == 0
    assert "outcome=fail_open reason=no_match" in err
    assert "env" not in yaml.safe_load(out)["spec"]["containers"][0]


def test_admit_reports_every_workload_of_a_multi_document_file(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every workload is admitted and reported, not only the first."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "llm"}, "spec": {}}
    web = deployment(labels={"app": "web"})
    web["metadata"]["name"] = "web"
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "batch", "namespace": "team-a"},
        "spec": {"jobTemplate": {"spec": {"template": deployment()["spec"]["template"]}}},
    }
    daemon = {**deployment(), "kind": "DaemonSet"}
    daemon["metadata"] = {"name": "ds", "namespace": "team-a"}
    manifest = write(tmp_path / "all.yaml", svc, deployment(), web, cron, daemon)
    code, out, err = run(capsys, "-f", str(manifest), "--backends-from", str(backends_dir))
    assert code == 0
    pods = list(yaml.safe_load_all(out))
    assert [p["metadata"]["generateName"] for p in pods] == ["llm-", "web-", "batch-", "ds-"]
    lines = err.splitlines()
    assert f"skipped Service ({manifest}, document 1): not a workload" in lines
    for prefix, outcome in (
        ("Deployment team-a/llm (", "outcome=injected"),
        ("Deployment team-a/web (", "reason=no_match"),
        ("CronJob team-a/batch (", "outcome=injected"),
        ("DaemonSet team-a/ds (", "outcome=injected"),
    ):
        assert any(line.startswith(prefix) and outcome in line for line in lines), prefix


def test_admit_reads_a_directory_and_repeated_files(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "in" / "a" / "one.yaml", deployment())
    other = deployment()
    other["metadata"]["name"] = "two"
    second = write(tmp_path / "two.json", other)
    code, out, _ = run(
        capsys,
        "-f",
        str(tmp_path / "in"),
        "-f",
        str(second),
        "--backends-from",
        str(backends_dir),
        "-o",
        "json",
    )
    assert code == 0
    report = json.loads(out)
    assert [(r["name"], r["wired"]) for r in report] == [("llm", True), ("two", True)]
    assert report[0]["backend"] == "team-a/cache"


def test_fail_on_unwired_exits_1_and_says_why(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    web = deployment(labels={"app": "web"})
    manifest = write(tmp_path / "d.yaml", deployment(), web)
    args = ["-f", str(manifest), "--backends-from", str(backends_dir)]
    code, _, _ = run(capsys, *args)
    assert code == 0  # fail-open is still an admission
    code, _, err = run(capsys, *args, "--fail-on-unwired")
    assert code == 1
    assert (
        "icache admit-pod: 1 of 2 workload(s) would be admitted unwired: Deployment team-a/llm: "
        "no CacheBackend in 'team-a' selects this pod"
    ) in err


def test_fail_on_unwired_accepts_an_explicit_opt_out(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """skip-inject is the operator's choice, not a wiring failure."""
    doc = deployment()
    doc["spec"]["template"]["metadata"]["annotations"] = {c.ANNOTATION_SKIP_INJECT: "true"}
    manifest = write(tmp_path / "d.yaml", doc)
    code, _, err = run(
        capsys, "-f", str(manifest), "--backends-from", str(backends_dir), "--fail-on-unwired"
    )
    assert code == 0
    assert "outcome=skipped reason=skip_inject_annotation" in err


def test_patch_output_of_several_workloads_names_each(
    tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = deployment()
    other["metadata"]["name"] = "two"
    manifest = write(tmp_path / "d.yaml", deployment(), other)
    _, out, _ = run(
        capsys, "-f", str(manifest), "--backends-from", str(backends_dir), "-o", "patch"
    )
    patches = json.loads(out)
    assert [p["name"] for p in patches] == ["llm", "two"]
    assert all(p["patch"] for p in patches)


@pytest.mark.parametrize(
    "content", ["kind: [broken", yaml.safe_dump({"apiVersion": "v1", "kind": "Service"})]
)
def test_admit_unreadable_input_exits_2(
    content: str, tmp_path: Path, backends_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "x.yaml"
    manifest.write_text(content)
    code, out, err = run(capsys, "-f", str(manifest), "--backends-from", str(backends_dir))
    assert code == 2
    assert out == ""
    assert err.startswith("icache admit-pod: error:")
    assert len(err.strip().splitlines()) == 1


def test_admit_missing_backends_dir_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "d.yaml", deployment())
    with pytest.raises(SystemExit) as info:
        run(capsys, "-f", str(manifest), "--backends-from", str(tmp_path / "none"))
    assert info.value.code == 2
    assert "no such directory" in capsys.readouterr().err
