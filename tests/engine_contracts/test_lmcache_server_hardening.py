"""The managed LMCache server runs with a read-only root filesystem, no egress and a
non-root user (decision "Managed tiers restricted by default"): what its module in the
pinned lmcache releases does at run time must fit. At both pin sets, the server
(``lmcache.v1.server``, which the ``lmcache_server`` console script runs) opens no file,
creates no directory or temporary file, and dials nothing: it binds a socket and
answers."""

from __future__ import annotations

import ast

import pytest

from shared.engine_versions import LMCACHE, NEWEST, SAMPLE_TARGETS
from tests.engine_contracts.cache import SOURCES, require_release
from tests.engine_contracts.source import SourceTree

SERVER_PACKAGE = "lmcache.v1.server"
# Calls that write to the filesystem or open an outgoing connection.
WRITES = {"open", "makedirs", "mkdir", "mkdtemp", "mkstemp", "NamedTemporaryFile", "TemporaryFile"}
DIALS = {"connect", "connect_ex", "create_connection", "getaddrinfo", "gethostbyname"}


def server_modules(tree: SourceTree) -> list[str]:
    out: list[str] = []
    for package in (SERVER_PACKAGE, f"{SERVER_PACKAGE}.storage_backend"):
        if tree.has_module(package):
            out.append(package)
        out += tree.modules_under(package)
    return out


def called_names(module: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


@pytest.mark.parametrize("version", sorted({SAMPLE_TARGETS.lmcache, NEWEST.lmcache}))
def test_the_lmcache_server_writes_no_file_and_dials_nothing(version: str) -> None:
    tree = SourceTree(require_release(LMCACHE, version) / SOURCES, f"lmcache {version}")
    modules = server_modules(tree)
    assert f"{SERVER_PACKAGE}.__main__" in modules, modules
    for module in modules:
        calls = called_names(tree.parse(module))
        assert not calls & WRITES, f"lmcache {version} {module} writes: {calls & WRITES}"
        assert not calls & DIALS, f"lmcache {version} {module} dials: {calls & DIALS}"
