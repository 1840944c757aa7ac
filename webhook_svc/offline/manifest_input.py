"""The documents of ``-f FILE|DIR|-`` (repeatable), as ``kubectl apply -f`` reads them.

A directory is read recursively (``.yaml``, ``.yml``, ``.json``, in path order); ``-``
is standard input (``kustomize build | icache validate -f -``). Every file may hold
several YAML documents; ``kind: List`` (and ``*List``) documents and bare YAML
sequences are unpacked into their items. Scalars are read as Kubernetes reads them:
YAML 1.2 booleans (``on``/``off``/``yes``/``no`` stay strings) and timestamps kept as
strings. Each document remembers where it came from, for messages and reports.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli_support.arg_types import STDIN
from shared.objects import metadata as metadata_of
from webhook_svc.backend_files import SUFFIXES, BackendFileError, parse_text


class InputError(Exception):
    """A file cannot be read or is not YAML: one line, exit code 2."""


@dataclass(frozen=True)
class Document:
    source: str  # the file's path, or "<stdin>"
    index: int  # 1-based position among the file's documents (after unpacking lists)
    body: Any

    @property
    def where(self) -> str:
        return f"{self.source}, document {self.index}"

    @property
    def kind(self) -> str:
        return str(self.body.get("kind") or "") if isinstance(self.body, dict) else ""

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion") or "") if isinstance(self.body, dict) else ""

    @property
    def metadata(self) -> dict[str, Any]:
        return metadata_of(self.body) if isinstance(self.body, dict) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or self.metadata.get("generateName") or "")


def parse_documents(text: str, source: str) -> list[Document]:
    """The documents of one file's text (empty documents dropped, lists unpacked)."""
    try:
        raw = parse_text(text, source)
    except BackendFileError as exc:
        raise InputError(str(exc)) from None
    out: list[Document] = []
    for doc in raw:
        for item in _unpacked(doc):
            if item is not None:
                out.append(Document(source, len(out) + 1, item))
    return out


def _unpacked(doc: Any) -> Iterator[Any]:
    if isinstance(doc, list):
        yield from doc
    elif (
        isinstance(doc, dict)
        and str(doc.get("kind") or "").endswith("List")
        and isinstance(doc.get("items"), list)
    ):
        yield from doc["items"]
    else:
        yield doc


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return [p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    return [path]


def read_inputs(names: Sequence[str]) -> list[Document]:
    """Every document of every ``-f`` argument, in order."""
    docs: list[Document] = []
    stdin_read = False
    for name in names:
        if name == STDIN:
            if stdin_read:
                raise InputError("-f - given twice: standard input can be read once")
            stdin_read = True
            docs.extend(parse_documents(sys.stdin.read(), "<stdin>"))
            continue
        path = Path(name)
        if not path.exists():
            raise InputError(f"{name}: no such file or directory")
        for file in _files(path):
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{file}: cannot read it: {exc}") from exc
            docs.extend(parse_documents(text, str(file)))
    return docs
