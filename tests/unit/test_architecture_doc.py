"""docs/architecture.md names only code that exists, so it cannot drift silently.

The doc names code three ways, each in backticks, and each is checked here:

* a file or directory of the repository: `webhook_svc/app.py`, `reconciler/`;
* a hop of a request path, file and function: `reconciler/tasks.py:run_key`,
  `reconciler/reconcile.py:Reconciler.reconcile` (a function or class of that file,
  then its members, nested functions included);
* a dotted name in a product package: `shared.defaulting.default_cachebackend`.

It also keeps the two request-path blocks (Pod admission, reconcile), which are
delimited so they can be rewritten when a path changes.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PRODUCT = (
    "shared",
    "kubeio",
    "cli_support",
    "icache_cli",
    "webhook_svc",
    "reconciler",
    "icache_install",
)

TICKED = re.compile(r"`([^`\s]+)`")
# A relative path: a first segment without a dot (so not a domain such as
# `inferencecache.io/...` or `admission.k8s.io/v1`), then either a trailing slash (a
# directory) or a last segment with an extension (a file). `namespace/name` is neither.
PATH = re.compile(r"^[A-Za-z_][\w-]*/(?:[\w.-]+/)*(?:[\w-]+\.[\w.]+)?$")
TOP_FILE = re.compile(r"^(?:Dockerfile\.\w+|Makefile|pyproject\.toml|constraints\.txt)$")
HOP = re.compile(r"^(?P<path>[\w/.-]+\.py):(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")
DOTTED = re.compile(rf"^(?:{'|'.join(PRODUCT)})(?:\.[A-Za-z_]\w*)+$")


def ticked(text: str) -> list[str]:
    return TICKED.findall(text)


def paths(text: str) -> list[str]:
    return [t for t in ticked(text) if PATH.match(t) or TOP_FILE.match(t)]


def hops(text: str) -> list[tuple[str, str]]:
    return [(m["path"], m["name"]) for t in ticked(text) if (m := HOP.match(t))]


def dotted_names(text: str) -> list[str]:
    return [t for t in ticked(text) if DOTTED.match(t)]


def _members(node: ast.AST) -> dict[str, ast.AST]:
    """Names a module, class or function body defines: functions, classes, assigned names."""
    out: dict[str, ast.AST] = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[child.name] = child
        elif isinstance(child, ast.Assign | ast.AnnAssign):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            out.update((t.id, child) for t in targets if isinstance(t, ast.Name))
    return out


def defines(source: str, name: str) -> bool:
    """Whether ``name`` (``f``, ``Class.method``, ``outer.inner``) is defined in ``source``."""
    node: ast.AST = ast.parse(source)
    for part in name.split("."):
        found = _members(node).get(part)
        if found is None:
            return False
        node = found
    return True


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_extractors_see_what_they_must_and_skip_what_is_no_path() -> None:
    sample = (
        "`webhook_svc/app.py` `reconciler/` `Dockerfile.webhook` "
        "`reconciler/tasks.py:run_key` `shared.defaulting.default_cachebackend` "
        "`inferencecache.io/cachebackend: <name>` `admission.k8s.io/v1` `namespace/name` "
        "`/healthz` `~/.kube/config` `deployment.kubernetes.io/revision`"
    )
    assert paths(sample) == ["webhook_svc/app.py", "reconciler/", "Dockerfile.webhook"]
    assert hops(sample) == [("reconciler/tasks.py", "run_key")]
    assert dotted_names(sample) == ["shared.defaulting.default_cachebackend"]
    assert defines("class A:\n    def f(self):\n        def g(): ...\n", "A.f.g")
    assert not defines("def f(): ...\n", "f.g")
    assert not resolves("shared.defaulting.no_such_function")


def test_every_path_the_doc_names_exists() -> None:
    found = paths(DOC.read_text())
    assert len(found) > 20, "the doc names the files of each hop"
    missing = sorted({p for p in found if not (REPO / p).exists()})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_hop_names_a_function_its_file_defines() -> None:
    found = hops(DOC.read_text())
    assert len(found) > 10, "each request path names its hops as file:function"
    wrong = sorted(
        {
            f"{path}:{name}"
            for path, name in found
            if not (REPO / path).is_file() or not defines((REPO / path).read_text(), name)
        }
    )
    assert not wrong, f"docs/architecture.md names hops that do not exist: {wrong}"


def test_every_dotted_name_the_doc_gives_resolves() -> None:
    found = dotted_names(DOC.read_text())
    assert found
    wrong = sorted({n for n in found if not resolves(n)})
    assert not wrong, f"docs/architecture.md names code that does not exist: {wrong}"


@pytest.mark.parametrize("path", ["pod-admission", "reconcile"])
def test_each_request_path_is_one_delimited_block(path: str) -> None:
    text = DOC.read_text()
    opening, closing = f"<!-- path:{path} -->", f"<!-- /path:{path} -->"
    assert text.count(opening) == 1
    assert text.count(closing) == 1
    block = text[text.index(opening) : text.index(closing)]
    assert len(hops(block)) >= 5, f"the {path} path names its hops as file:function"
