"""CacheBackends from YAML/JSON files in a directory (``--backends-from``).

Used by ``icache admit-pod`` and by the webhook's embedded mode. Every document of kind
CacheBackend in the inferencecache.io group is returned as written, ``status``
included (a managed backend's ``status.endpoint`` is what the Pod webhook wires to);
documents of other kinds are ignored, and list documents (``kind: List``,
``kind: CacheBackendList`` — what ``kubectl get -o yaml`` prints — or a bare YAML
sequence) are unpacked. A backend without ``metadata.namespace`` is placed in
``default_namespace``, as ``kubectl apply`` would in the default namespace.

Scalars are read with YAML 1.2 booleans (and timestamps kept as strings): only ``true``/``false`` are booleans, so an
unquoted ``off``, ``on``, ``yes`` or ``no`` (a kernel-check annotation value, a label
value) stays the string it was written as instead of turning into a YAML 1.1 boolean.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from shared import constants as c
from shared.objects import metadata

SUFFIXES = (".yaml", ".yml", ".json")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader whose booleans are YAML 1.2's (true/false only) and whose timestamps
    stay strings (as Kubernetes reads them)."""


_DROPPED_TAGS = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class BackendFileError(ValueError):
    """A file under the directory is not parseable YAML/JSON."""


def _is_cache_backend(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == c.KIND
        and str(doc.get("apiVersion") or "").split("/", 1)[0] == c.GROUP
    )


def parse_text(text: str, source: str) -> list[Any]:
    """The documents of one file's text, as the API server's clients read them: JSON when
    the text starts with ``{`` or ``[`` (JSON with tabs is not YAML), else YAML 1.2
    documents. ``BackendFileError`` with one line naming ``source`` and the line when the
    text is neither, or when a YAML alias refers to a node that contains it (a cycle,
    which Kubernetes' YAML reader refuses too)."""
    try:
        docs = _parsed(text, source)
    except RecursionError:
        raise BackendFileError(f"{source}: nested too deeply to read") from None
    for index, doc in enumerate(docs, 1):
        if _has_cycle(doc):
            raise BackendFileError(
                f"{source}, document {index}: a YAML alias refers to a node that contains it"
            )
    return docs


def _parsed(text: str, source: str) -> list[Any]:
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped[:1] in ("{", "["):
        try:
            return [json.loads(stripped)]
        except json.JSONDecodeError as exc:
            if "\t" in text:  # YAML cannot read it either: say what JSON found
                raise BackendFileError(
                    f"{source}: not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
                ) from None
            # YAML flow style ({a: b}) starts the same way: fall through to YAML.
    try:
        return list(yaml.load_all(text, Loader=_Yaml12Loader))
    except yaml.YAMLError as exc:
        raise BackendFileError(f"{source}: not YAML: {_yaml_problem(exc)}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: the problem and where (1-based line and column)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        what = exc.problem or exc.context or "invalid"
        if mark is not None:
            return f"{what} at line {mark.line + 1}, column {mark.column + 1}"
        return str(what)
    return " ".join(str(exc).split())


def _has_cycle(root: Any) -> bool:
    """Whether a list or mapping contains itself (built by a YAML alias to an enclosing
    anchor). Depth-first without recursion, so depth cannot exhaust the stack, and each
    node shared by several aliases is walked once."""
    done: set[int] = set()
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if not isinstance(node, dict | list) or id(node) in done:
            continue
        if id(node) in on_path:
            return True
        on_path.add(id(node))
        stack.append((node, True))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, False) for child in children)
    return False


def _documents(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BackendFileError(f"{path}: cannot read it: {exc}") from exc
    out: list[Any] = []
    for doc in parse_text(text, str(path)):
        if isinstance(doc, list):
            out.extend(doc)
        elif (
            isinstance(doc, dict)
            and str(doc.get("kind") or "").endswith("List")
            and isinstance(doc.get("items"), list)
        ):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def load_backends(
    directory: Path | str, default_namespace: str = "default"
) -> list[dict[str, Any]]:
    """Every CacheBackend document under ``directory`` (recursively, in path order)."""
    root = Path(directory)
    if not root.is_dir():
        raise BackendFileError(f"{root} is not a directory")
    backends: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        for doc in _documents(path):
            if not _is_cache_backend(doc):
                continue
            raw_meta = metadata(doc)  # the file's own, or a new one where it has none
            if not raw_meta.get("namespace"):
                raw_meta["namespace"] = default_namespace
            doc["metadata"] = raw_meta
            backends.append(doc)
    return backends
