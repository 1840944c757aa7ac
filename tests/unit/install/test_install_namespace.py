"""The install namespace is one name everywhere.

`shared.constants.INSTALL_NAMESPACE` is the only spelling code uses; every
manifest (kustomizations, RBAC, base, components), every default of the processes
and installers, and the docs must name that namespace and no other `*-system`
namespace of ours. A second name (say `icache-` + `system` in the RBAC YAML or the
dispatcher's Lease default) splits the install: the ServiceAccounts land in one
namespace and their bindings point at another.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.constants import INSTALL_NAMESPACE

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
# Namespaces that are not ours and may be named on purpose.
FOREIGN_NAMESPACES = {"kube-system"}
# `*-system` tokens that are not namespaces at all (e.g. `useradd --system`).
SYSTEM_TOKEN = re.compile(r"(?<![A-Za-z0-9-])([a-z0-9][a-z0-9-]*-system)(?![A-Za-z0-9-])")
SCANNED_SUFFIXES = {".py", ".yaml", ".yml", ".md", ".sh", ".toml"}
SCANNED_ROOTS = ("shared", "webhook_svc", "reconciler", "icache_install", "manifests", "docs")


def _install_yaml_files() -> list[Path]:
    """Every YAML of the install (samples are users' objects, in users' namespaces)."""
    return sorted(
        p for p in MANIFESTS.rglob("*.yaml") if "samples" not in p.relative_to(MANIFESTS).parts
    )


def _namespace_refs(doc: Any, where: str) -> Iterator[tuple[str, str]]:
    """(where, namespace) for every field of ``doc`` that names a namespace."""
    if not isinstance(doc, dict):
        return
    kind = doc.get("kind")
    meta = doc.get("metadata") or {}
    if kind in ("Kustomization",) and doc.get("namespace"):
        yield f"{where}: namespace", str(doc["namespace"])
    if kind == "Namespace":
        yield f"{where}: Namespace name", str(meta.get("name"))
    if meta.get("namespace"):
        yield f"{where}: {kind}/{meta.get('name')} metadata.namespace", str(meta["namespace"])
    for subject in doc.get("subjects") or []:
        if subject.get("namespace"):
            yield f"{where}: {kind}/{meta.get('name')} subject", str(subject["namespace"])
    for webhook in doc.get("webhooks") or []:
        service = (webhook.get("clientConfig") or {}).get("service") or {}
        if service.get("namespace"):
            yield f"{where}: {kind}/{meta.get('name')} service", str(service["namespace"])
    for patch in doc.get("patches") or []:
        if isinstance(patch, dict) and isinstance(patch.get("patch"), str):
            for sub in yaml.safe_load_all(patch["patch"]):
                yield from _namespace_refs(sub, f"{where} (patch)")


def test_every_install_manifest_names_the_install_namespace() -> None:
    refs = [
        ref
        for path in _install_yaml_files()
        for doc in yaml.safe_load_all(path.read_text())
        for ref in _namespace_refs(doc, str(path.relative_to(REPO)))
    ]
    assert refs, "found no namespace references: the scan is broken"
    wrong = [f"{where} = {ns}" for where, ns in refs if ns != INSTALL_NAMESPACE]
    assert not wrong, f"not {INSTALL_NAMESPACE}:\n" + "\n".join(wrong)


def _scanned_files() -> Iterator[Path]:
    for root in SCANNED_ROOTS:
        base = REPO / root
        if base.is_dir():
            yield from (p for p in base.rglob("*") if p.suffix in SCANNED_SUFFIXES)
    yield from (REPO / name for name in ("README.md", "Makefile") if (REPO / name).exists())
    yield from REPO.glob("Dockerfile*")
    yield from (REPO / "tests").rglob("*.py")


def test_code_docs_and_tests_name_no_other_system_namespace() -> None:
    found = {
        f"{path.relative_to(REPO)}:{lineno}: {match}"
        for path in _scanned_files()
        for lineno, line in enumerate(path.read_text().splitlines(), 1)
        for match in SYSTEM_TOKEN.findall(line)
        if match not in FOREIGN_NAMESPACES | {INSTALL_NAMESPACE}
    }
    assert not found, "a namespace other than the install's:\n" + "\n".join(sorted(found))


def test_code_spells_the_namespace_once() -> None:
    """Code uses the constant; the literal lives only in shared/constants.py."""
    literal = f'"{INSTALL_NAMESPACE}"'
    offenders = [
        str(p.relative_to(REPO))
        for root in ("shared", "webhook_svc", "reconciler", "icache_install")
        if (REPO / root).is_dir()
        for p in (REPO / root).rglob("*.py")
        if literal in p.read_text() and p != REPO / "shared" / "constants.py"
    ]
    assert not offenders, f"spell it shared.constants.INSTALL_NAMESPACE: {offenders}"


@pytest.mark.parametrize(
    ("module_name", "option"),
    [
        ("reconciler.dispatch.dispatcher_cli", "lease_namespace"),
        ("icache_install.certs_cli", "namespace"),
    ],
)
def test_process_defaults_are_the_install_namespace(
    module_name: str, option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).add_arguments(parser)
    assert getattr(parser.parse_args([]), option) == INSTALL_NAMESPACE
