"""`icache validate` as a CI step: inputs, outputs and exit codes (the verdicts
themselves are compared with the live API server in
tests/integration/webhook/test_validate_server.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from icache_cli.main import main
from tests.samples import SAMPLES_DIR

GOOD = """\
apiVersion: inferencecache.io/v1alpha1
kind: CacheBackend
metadata: {name: good, namespace: team-a}
spec: {runtime: VLLM, engineSelector: {matchLabels: {app: vllm}}}
"""
BAD = """\
apiVersion: inferencecache.io/v1alpha1
kind: CacheBackend
metadata: {name: bad}
spec:
  runtime: VLLM
  remoteStorage: {provider: LMCacheServer, ownership: External}
"""
MOON = """\
apiVersion: inferencecache.io/v1alpha1
kind: CacheBackend
metadata: {name: moon}
spec: {runtime: VLLM, remoteStorage: {provider: Mooncake, ownership: Managed}}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n"


def _run(
    capsys: pytest.CaptureFixture[str],
    *argv: str,
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    rc = main(["validate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_every_shipped_sample_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "-f", str(SAMPLES_DIR))
    assert rc == 0, out
    assert " 0 invalid" in out


def test_an_invalid_document_among_others_exits_1_and_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "all.yaml", "---\n".join([GOOD, BAD, CONFIGMAP]))
    rc, out, _ = _run(capsys, "-f", path)
    assert rc == 1
    assert f"valid cachebackend team-a/good ({path}, document 1)" in out
    assert f"invalid cachebackend default/bad ({path}, document 2)" in out
    assert "spec.remoteStorage.endpoint: Required value" in out
    assert f"skipped configmap cm ({path}, document 3): ConfigMap is not a CacheBackend" in out


def test_kustomize_output_on_stdin_and_lists_are_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(GOOD), yaml.safe_load(BAD)]}
    )
    rc, out, _ = _run(capsys, "-f", "-", "-o", "json", stdin=listing, monkeypatch=monkeypatch)
    assert rc == 1
    report = json.loads(out)
    assert [d["result"] for d in report["documents"]] == ["valid", "invalid"]
    assert report["documents"][0]["source"] == "<stdin>"


def test_json_report_is_stable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/cli.md documents these keys; a change here is a change of the contract."""
    path = _write(tmp_path, "a.yaml", "---\n".join([GOOD, BAD, MOON]))
    _, out, _ = _run(capsys, "-f", path, "-o", "json")
    report: dict[str, Any] = json.loads(out)
    assert set(report) == {"apiVersion", "kind", "documents", "summary"}
    assert report["kind"] == "ValidationReport"
    assert report["summary"] == {"valid": 2, "invalid": 1, "skipped": 0, "warnings": 1}
    keys = {
        "source",
        "document",
        "apiVersion",
        "kind",
        "namespace",
        "name",
        "operation",
        "result",
        "stage",
        "reason",
        "message",
        "causes",
        "warnings",
        "note",
        "defaulted",
    }
    for doc in report["documents"]:
        assert set(doc) == keys
    bad = report["documents"][1]
    assert bad["stage"] == "webhook"
    assert bad["message"].startswith(
        'admission webhook "vcachebackend.inferencecache.io" denied the request: '
    )
    assert bad["causes"][0]["field"] == "spec.remoteStorage.endpoint"
    good = report["documents"][0]
    assert good["defaulted"]["spec"]["integration"]["failOpen"] is True


def test_warnings_fail_only_with_warnings_as_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "moon.yaml", MOON)
    rc, out, _ = _run(capsys, "-f", path)
    assert rc == 0
    assert "Warning: Mooncake: set spec.integration.engineHostNetwork=true" in out
    rc, _, _ = _run(capsys, "-f", path, "--warnings-as-errors")
    assert rc == 1


def test_yaml_output_is_the_defaulted_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "good.yaml", GOOD)
    rc, out, err = _run(capsys, "-f", path, "-o", "yaml")
    assert rc == 0
    (obj,) = list(yaml.safe_load_all(out))
    assert obj["spec"]["observation"]["firstEventTimeout"] == "5m"
    assert obj["spec"]["type"] == "LMCache"
    assert "valid cachebackend team-a/good" in err


def test_a_directory_is_read_recursively_and_files_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "d/sub/good.yaml", GOOD)
    other = _write(tmp_path, "moon.json", json.dumps(yaml.safe_load(MOON)))
    rc, out, _ = _run(capsys, "-f", str(tmp_path / "d"), "-f", other, "-o", "json")
    assert rc == 0
    assert [d["name"] for d in json.loads(out)["documents"]] == ["good", "moon"]


def test_old_makes_an_update_with_the_introduced_violations_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spec "Validating": ValidateUpdate only rejects violations the update introduces."""
    legacy = BAD.replace("ownership: External}", "ownership: External, endpoint: 'lm://r:1'}")
    legacy = legacy.replace("provider: LMCacheServer", "provider: Redis")
    old = _write(tmp_path, "old.yaml", legacy)
    relabelled = legacy.replace("metadata: {name: bad}", "metadata: {name: bad, labels: {a: b}}")
    rc, out, _ = _run(capsys, "-f", _write(tmp_path, "new.yaml", relabelled), "--old", old)
    assert rc == 0, out
    assert "(UPDATE)" in out
    rc, out, _ = _run(capsys, "-f", _write(tmp_path, "new.yaml", relabelled))
    assert rc == 1  # as a CREATE the old violation counts
    worse = relabelled.replace("lm://r:1", "http://r:2")
    rc, out, _ = _run(capsys, "-f", _write(tmp_path, "new.yaml", worse), "--old", old)
    assert rc == 1
    assert "spec.remoteStorage.endpoint" in out


def test_unknown_fields_follow_field_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "typo.yaml", GOOD.replace("engineSelector", "engineSelectr"))
    rc, out, _ = _run(capsys, "-f", path)
    assert rc == 1
    assert 'strict decoding error: unknown field "spec.engineSelectr"' in out
    rc, out, _ = _run(capsys, "-f", path, "--field-validation", "Warn")
    assert rc == 0
    assert 'Warning: unknown field "spec.engineSelectr"' in out
    rc, out, _ = _run(capsys, "-f", path, "--field-validation", "Ignore")
    assert (rc, "Warning" in out) == (0, False)


def test_a_served_group_in_another_version_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "v1.yaml", GOOD.replace("v1alpha1", "v1"))
    rc, out, _ = _run(capsys, "-f", path)
    assert rc == 1
    assert 'no matches for kind "CacheBackend" in version "inferencecache.io/v1"' in out


@pytest.mark.parametrize(
    ("content", "words"),
    [("a: [\n b", "not YAML"), (None, "no such file or directory")],
)
def test_unreadable_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, words: str
) -> None:
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    if content is None:  # the flag's type refuses it while parsing
        with pytest.raises(SystemExit) as info:
            main(["validate", "-f", str(path)])
        assert info.value.code == 2
    else:
        assert main(["validate", "-f", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err
    assert len(err.splitlines()) == 1


def test_no_cache_backend_at_all_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = _run(capsys, "-f", _write(tmp_path, "cm.yaml", CONFIGMAP))
    assert rc == 0
    assert "no CacheBackend in the input (1 other document(s) skipped)" in out


def test_unknown_fields_inside_lists_are_named_and_pruned() -> None:
    from webhook_svc.offline.validate_cli import pruned, unknown_fields

    obj = yaml.safe_load(GOOD)
    obj["spec"]["integration"] = {
        "engineOverrides": {"env": [{"name": "A", "value": "1"}, {"name": "B", "valu": "2"}]}
    }
    obj["spec"]["remoteStorage"] = {
        "provider": "LMCacheServer",
        "ownership": "Managed",
        "lmCacheServer": {"resources": {"limits": {"memory": "1Gi", "nvidia.com/gpu": 1}}},
    }
    assert unknown_fields(obj) == ["spec.integration.engineOverrides.env[1].valu"]
    assert pruned(obj)["spec"]["integration"]["engineOverrides"]["env"][1] == {"name": "B"}
