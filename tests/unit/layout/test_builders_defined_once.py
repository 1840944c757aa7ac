"""Each test builder and Kubernetes test double is defined once: in tests/builders.py
(backends, pods, AdmissionReviews) or tests/fakes.py (fake clients).

The rule, read from each module's syntax tree (every ``.py`` under tests/ except those
two files):

- no function named as a builder of those objects, at module level or nested in a
  function. Methods are not builders: a method named ``review`` implements a client's
  interface (a fake SubjectAccessReview client), and ``Cluster.cb`` in the e2e conftest
  reads a backend from the cluster;
- no dict literal whose ``"kind"`` is ``"AdmissionReview"`` (tests/builders.py builds
  the envelope; a response checked for that kind is a comparison, not a literal);
- no class that subclasses ``Kube`` or ``FakeKube`` (tests/fakes.py holds the doubles).

And no module imports from a test module (``test_*``), read from both the module an
import names and every name it imports (``from tests.e2e import test_rollouts`` takes
a test module as a name): what two test modules share lives in a helper module
(builders, fakes, a conftest, a harness module, ``tests/e2e/cascade.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
HOMES = {TESTS / "builders.py", TESTS / "fakes.py"}
BUILDER_NAMES = frozenset(
    {"backend", "pod", "cb", "review", "_backend", "_pod", "_cb", "make_backend", "make_pod"}
)
DOUBLE_BASES = frozenset({"Kube", "FakeKube"})


def _functions_outside_classes(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions at module level or nested in functions, not methods of a class."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and not isinstance(
                node, ast.ClassDef
            ):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _is_admission_review_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant)
        and k.value == "kind"
        and isinstance(v, ast.Constant)
        and v.value == "AdmissionReview"
        for k, v in zip(node.keys, node.values, strict=True)
    )


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement reads: the modules it names and, for
    ``from m import a, b``, each imported name under its module (``m.a``, ``m.b``),
    since an imported name may itself be a module (``from tests.e2e import test_x``)."""
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return [alias.name for alias in node.names]


def violations(path: Path, source: str) -> list[str]:
    """Where the module at ``path`` defines a builder or a double outside its home,
    in line order."""
    tree = ast.parse(source, filename=str(path))
    found = [
        (fn.lineno, f"defines {fn.name}()")
        for fn in _functions_outside_classes(tree)
        if fn.name in BUILDER_NAMES
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import) and any(
            part.startswith("test_") for name in _imported(node) for part in name.split(".")
        ):
            found.append((node.lineno, "imports from a test module"))
        if isinstance(node, ast.Dict) and _is_admission_review_literal(node):
            found.append((node.lineno, "builds an AdmissionReview literal"))
        if isinstance(node, ast.ClassDef) and any(
            _base_name(b) in DOUBLE_BASES for b in node.bases
        ):
            found.append((node.lineno, f"defines a Kubernetes double {node.name}"))
    return [f"{path}:{line} {what}" for line, what in sorted(found)]


def test_the_rule_sees_each_kind_of_redefinition() -> None:
    """The check can fail: each shape it forbids is reported, and a method is not."""
    source = (
        "def pod(): ...\n"
        "def outer():\n    def backend(): ...\n"
        "class Reader:\n    def cb(self): ...\n"
        "R = {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview'}\n"
        "class Gap(k.Kube): ...\n"
        "from tests.unit.test_status import obj\n"
        "from tests.e2e import test_rollouts as rollouts\n"
        "from . import test_status\n"
        "import tests.e2e.test_chaos\n"
        "from tests.e2e import cascade, conftest\n"
    )
    found = violations(Path("m.py"), source)
    assert found == [
        "m.py:1 defines pod()",
        "m.py:3 defines backend()",
        "m.py:6 builds an AdmissionReview literal",
        "m.py:7 defines a Kubernetes double Gap",
        "m.py:8 imports from a test module",
        "m.py:9 imports from a test module",
        "m.py:10 imports from a test module",
        "m.py:11 imports from a test module",
    ]


def test_builders_and_doubles_are_defined_only_in_builders_and_fakes() -> None:
    found = [
        v
        for path in sorted(TESTS.rglob("*.py"))
        if path not in HOMES
        for v in violations(path.relative_to(TESTS.parent), path.read_text())
    ]
    assert found == [], "\n".join(found)
