"""docs/architecture.md names only code that exists, so it cannot drift silently.

The doc names code three ways, each in backticks, and each is checked here:

* a file or directory of the repository: `webhook_svc/app.py`, `reconciler/`;
* a hop of a request path, file and function: `reconciler/work/tasks.py:run_key`,
  `reconciler/steps/reconcile.py:Reconciler.reconcile` (a function or class of that file,
  then its members, nested functions included);
* a dotted name in a product package: `shared.defaulting.default_cachebackend`.

It also keeps the two request-path blocks (Pod admission, reconcile), which are
delimited so they can be rewritten when a path changes.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
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
        "`reconciler/work/tasks.py:run_key` `shared.defaulting.default_cachebackend` "
        "`inferencecache.io/cachebackend: <name>` `admission.k8s.io/v1` `namespace/name` "
        "`/healthz` `~/.kube/config` `deployment.kubernetes.io/revision`"
    )
    assert paths(sample) == ["webhook_svc/app.py", "reconciler/", "Dockerfile.webhook"]
    assert hops(sample) == [("reconciler/work/tasks.py", "run_key")]
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


@pytest.mark.parametrize("path", ["pod-admission", "dispatch", "reconcile"])
def test_each_request_path_is_one_delimited_block(path: str) -> None:
    text = DOC.read_text()
    opening, closing = f"<!-- path:{path} -->", f"<!-- /path:{path} -->"
    assert text.count(opening) == 1
    assert text.count(closing) == 1
    block = text[text.index(opening) : text.index(closing)]
    assert len(hops(block)) >= 5, f"the {path} path names its hops as file:function"


# ------------------------------------------------------------------ calls, in order


def definition(source: str, name: str) -> ast.AST | None:
    """The node defining ``name`` (``f``, ``Class.method``) in ``source``, or None."""
    node: ast.AST = ast.parse(source)
    for part in name.split("."):
        found = _members(node).get(part)
        if found is None:
            return None
        node = found
    return node


def references(node: ast.AST, name: str) -> bool:
    """Whether ``node``'s body calls ``name`` or hands it on (a callback, a class it
    builds): a Name or an attribute (``self.name``, ``module.name``) reading it."""
    return any(
        (isinstance(n, ast.Name) and n.id == name)
        or (isinstance(n, ast.Attribute) and n.attr == name)
        for child in ast.iter_child_nodes(node)
        if not isinstance(child, ast.arguments)
        for n in ast.walk(child)
    )


def uncalled_hops(hop_list: list[tuple[str, str]], read: Callable[[str], str]) -> list[str]:
    """The hops of a path, after its first (the entry the route or process calls),
    that no earlier hop of the path calls: each step must be reached from the ones the
    doc names before it."""
    wrong: list[str] = []
    nodes: list[ast.AST] = []
    for index, (path, name) in enumerate(hop_list):
        node = definition(read(path), name)
        assert node is not None, f"{path}:{name}"
        last = name.rsplit(".", 1)[-1]
        if index and not any(references(earlier, last) for earlier in nodes):
            wrong.append(f"{path}:{name}")
        nodes.append(node)
    return wrong


def _read(path: str) -> str:
    return (REPO / path).read_text()


def test_the_call_check_sees_a_hop_no_earlier_hop_calls(tmp_path: Path) -> None:
    """The check can fail: a hop nobody before it calls is reported; a call, a
    method call and a callback handed on all count."""
    files = {
        "a.py": "def entry():\n    step(x)\n    run(fn=later)\ndef step(x):\n    self.method()\n",
        "b.py": "class C:\n    def method(self):\n        pass\n"
        "def later():\n    pass\ndef orphan():\n    entry()\n",
    }
    hop_list = [("a.py", "entry"), ("a.py", "step"), ("b.py", "C.method"), ("b.py", "later")]
    assert uncalled_hops(hop_list, files.__getitem__) == []
    assert uncalled_hops([*hop_list, ("b.py", "orphan")], files.__getitem__) == ["b.py:orphan"]


@pytest.mark.parametrize("path", ["pod-admission", "dispatch", "reconcile"])
def test_each_hop_of_a_request_path_is_called_by_a_hop_before_it(path: str) -> None:
    """docs/architecture.md's request paths name what runs, in order: every hop after
    the entry is called (or handed on as a callback) by a hop the path names before
    it, so a path cannot name a function the route no longer reaches."""
    text = DOC.read_text()
    block = text[text.index(f"<!-- path:{path} -->") : text.index(f"<!-- /path:{path} -->")]
    wrong = uncalled_hops(hops(block), _read)
    assert not wrong, f"the {path} path names hops no earlier hop calls: {wrong}"


def _definition_in(tree: ast.AST, name: str) -> ast.AST | None:
    node: ast.AST | None = tree
    for part in name.split("."):
        node = _members(node).get(part) if node is not None else None
    return node


def test_every_function_the_doc_names_is_called_by_the_product() -> None:
    """A function the doc names is one the product runs: some product code outside its
    own body reads its name (a call, a callback), or a decorator registers it (a
    route, a Celery task), which is how a framework calls it."""
    trees = {
        str(p.relative_to(REPO)): ast.parse(p.read_text())
        for package in PRODUCT
        for p in sorted((REPO / package).rglob("*.py"))
    }
    wrong: list[str] = []
    for path, name in sorted(set(hops(DOC.read_text()))):
        node = _definition_in(trees[path], name)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.decorator_list:
            continue
        own = {id(n) for n in ast.walk(node)}
        last = name.rsplit(".", 1)[-1]
        used = any(
            id(n) not in own
            and (
                (isinstance(n, ast.Name) and n.id == last)
                or (isinstance(n, ast.Attribute) and n.attr == last)
            )
            for tree in trees.values()
            for n in ast.walk(tree)
        )
        if not used:
            wrong.append(f"{path}:{name}")
    assert not wrong, f"docs/architecture.md names functions nothing calls: {wrong}"
