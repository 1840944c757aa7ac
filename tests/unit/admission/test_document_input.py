"""How `icache validate`, `icache admit-pod` and the webhook's embedded mode read
manifest files (webhook_svc/backend_files.py parse_text): as kubectl reads them, JSON
or YAML, and every unreadable file one line naming the file and where in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from webhook_svc.backend_files import BackendFileError, parse_text

TABBED_POD = (
    '{\n\t"apiVersion": "v1",\n\t"kind": "Pod",\n\t"metadata": {"name": "p"},\n'
    '\t"spec": {"containers": [{"name": "a", "image": "b"}]}\n}\n'
)


def test_json_indented_with_tabs_is_read_as_json() -> None:
    """kubectl reads JSON as JSON: tabs, which YAML forbids, are fine."""
    (doc,) = parse_text(TABBED_POD, "pod.json")
    assert doc["metadata"] == {"name": "p"}
    assert parse_text('[\n\t{"a": 1}\n]', "list.json") == [[{"a": 1}]]


def test_yaml_flow_style_still_reads_as_yaml() -> None:
    assert parse_text("{a: b, c: [d]}", "flow.yaml") == [{"a": "b", "c": ["d"]}]
    assert parse_text("a: 1\n---\nb: on\n", "two.yaml") == [{"a": 1}, {"b": "on"}]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "a: [\n b: c\n",
            "broken.yaml: not YAML: expected ',' or ']', but got '<stream end>' "
            "at line 3, column 1",
        ),
        ('{\n\t"a": }', "broken.yaml: not JSON: Expecting value at line 2, column 7"),
        ("[" * 5000, "broken.yaml: nested too deeply to read"),
        (
            "a: &x\n  b: *x\n",
            "broken.yaml, document 1: a YAML alias refers to a node that contains it",
        ),
        ("ok: 1\n---\n&x [*x]\n", "broken.yaml, document 2: a YAML alias refers to a node"),
    ],
)
def test_an_unreadable_file_is_one_line_naming_the_file_and_where(text: str, words: str) -> None:
    with pytest.raises(BackendFileError) as info:
        parse_text(text, "broken.yaml")
    assert "\n" not in str(info.value)
    assert words in str(info.value)


def test_an_alias_used_twice_is_not_a_cycle() -> None:
    text = "base: &b {x: 1}\none: *b\ntwo: [*b, *b]\n"
    (doc,) = parse_text(text, "shared.yaml")
    assert doc["two"] == [{"x": 1}, {"x": 1}]


def test_many_aliases_of_aliases_are_checked_quickly() -> None:
    """Nine levels of nine aliases each: walked once per node, not 9**9 times."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    (doc,) = parse_text("\n".join(lines) + "\n", "laughs.yaml")
    assert len(doc) == 9


def _icache(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icache_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


@pytest.mark.services
def test_admit_pod_and_validate_read_tab_indented_json(tmp_path: Path) -> None:
    (tmp_path / "pod.json").write_text(TABBED_POD)
    backends = tmp_path / "backends"
    backends.mkdir()
    (backends / "cb.json").write_text(
        '{\n\t"apiVersion": "inferencecache.io/v1alpha1",\n\t"kind": "CacheBackend",\n'
        '\t"metadata": {"name": "c", "namespace": "default"},\n'
        '\t"spec": {"runtime": "VLLM", "engineSelector": {"matchLabels": {"app": "x"}}}\n}\n'
    )
    admitted = _icache("admit-pod", "-f", "pod.json", "--backends-from", "backends", cwd=tmp_path)
    assert admitted.returncode == 0, admitted.stderr
    assert "outcome=" in admitted.stderr
    validated = _icache("validate", "-f", "backends/cb.json", cwd=tmp_path)
    assert validated.returncode in (0, 1), validated.stderr
    assert "not YAML" not in validated.stderr + validated.stdout
    assert "cachebackend default/c" in (validated.stdout + validated.stderr).lower()
