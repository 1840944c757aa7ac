"""`icache validate`: judge CacheBackend manifests offline, as ``kubectl apply`` would.

    icache validate -f FILE|DIR|- [-f ...] [--old FILE] [-n NS] [-o text|yaml|json]
        [--warnings-as-errors] [--field-validation Strict|Warn|Ignore]

Every CacheBackend document of the input (multi-document YAML, ``kind: List``,
``kustomize build`` output on stdin) goes through what the API server does with it,
in the API server's order, and stops where the API server would stop:

1. decoding: the group/version must be served (``inferencecache.io/v1alpha1``), and
   an unknown field is an error (``--field-validation Strict``, kubectl's default),
   a warning (``Warn``) or dropped (``Ignore``);
2. the defaulting webhook's code (``mutate_cachebackend``), then the CRD schema's
   defaults;
3. the CRD schema's structural validation (the API server's own Invalid error);
4. the validating webhook's code (``validate_cachebackend``): its field-scoped errors
   and warnings, behind the API server's ``admission webhook ... denied the request``.

The webhooks run as the API server calls them, with an AdmissionReview: the same pure
functions the HTTP routes call, so the text is the text ``kubectl apply`` shows.
``--old FILE`` turns a document whose namespace/name is in FILE into an UPDATE of
that object: only violations the update introduces are errors (the spec's
ValidateUpdate rule). Documents of other kinds are skipped with a note.

Exit code: 1 when a document is invalid (with ``--warnings-as-errors``, also when one
has a warning), 2 when the input cannot be read, else 0.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import jsonpatch
import yaml

from cli_support import arg_types as cli_types
from shared import constants as c
from shared.api.crd import spec_openapi_schema
from shared.jsoncopy import json_copy
from shared.pod_wiring import DEFAULT_NAMESPACE
from shared.validation.context import judged_form
from shared.validation.schema import parse_spec, spec_type_error
from webhook_svc.admission_review import parse_review
from webhook_svc.cachebackend_admission import (
    QUALIFIED_KIND,
    invalid_status,
    mutate_cachebackend,
    validate_cachebackend,
)
from webhook_svc.offline.manifest_input import Document, InputError, read_inputs

# The validating webhook's name in the install's ValidatingWebhookConfiguration: the
# API server puts it in front of every denial.
VALIDATING_WEBHOOK: Final = "vcachebackend.inferencecache.io"
FIELD_VALIDATION: Final = ("Strict", "Warn", "Ignore")
VALIDATION_REPORT_KIND: Final = "ValidationReport"
# Top-level fields of a custom resource; metadata is ObjectMeta, not in the CRD schema.
_TOP_LEVEL: Final = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})

VALID: Final = "valid"
INVALID: Final = "invalid"
SKIPPED: Final = "skipped"


@dataclass
class DocumentVerdict:
    """What the API server would answer for one document."""

    doc: Document
    result: str  # valid | invalid | skipped
    operation: str = ""
    namespace: str = ""
    name: str = ""
    stage: str = ""  # decode | schema | webhook: who refused it
    reason: str = ""  # the Status reason: Invalid, BadRequest, NotFound
    message: str = ""  # the Status message kubectl prints
    causes: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    note: str = ""
    defaulted: dict[str, Any] | None = None

    def report(self) -> dict[str, Any]:
        """The stable JSON form (docs/cli.md)."""
        return {
            "source": self.doc.source,
            "document": self.doc.index,
            "apiVersion": self.doc.api_version,
            "kind": self.doc.kind,
            "namespace": self.namespace,
            "name": self.name or self.doc.name,
            "operation": self.operation,
            "result": self.result,
            "stage": self.stage,
            "reason": self.reason,
            "message": self.message,
            "causes": self.causes,
            "warnings": self.warnings,
            "note": self.note,
            "defaulted": self.defaulted,
        }


# ------------------------------------------------------------------ decoding


Loc = tuple[str | int, ...]


def unknown_locations(obj: Mapping[str, Any]) -> list[Loc]:
    """Where the fields the CRD schema does not declare are (what strict field
    validation rejects), in document order."""
    out: list[Loc] = [(k,) for k in obj if k not in _TOP_LEVEL]
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        _walk_unknown(spec, spec_openapi_schema()["properties"]["spec"], ("spec",), out)
    return out


def _walk_unknown(value: Any, schema: Mapping[str, Any], loc: Loc, out: list[Loc]) -> None:
    if not isinstance(schema, Mapping) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, Mapping):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            if isinstance(props, Mapping) and key in props:
                _walk_unknown(child, props[key], (*loc, key), out)
            elif isinstance(extra, Mapping):
                _walk_unknown(child, extra, (*loc, key), out)
            elif isinstance(props, Mapping) or extra is False:
                out.append((*loc, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _walk_unknown(item, schema["items"], (*loc, i), out)


def field_path(loc: Loc) -> str:
    """``spec.a[0].b``, as the API server names a field in its errors."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def unknown_fields(obj: Mapping[str, Any]) -> list[str]:
    return [field_path(loc) for loc in unknown_locations(obj)]


def strict_decoding_message(unknown: Sequence[str]) -> str:
    fields = ", ".join(f'unknown field "{p}"' for p in unknown)
    return (
        f'{c.KIND} in version "{c.VERSION}" cannot be handled as a {c.KIND}: '
        f"strict decoding error: {fields}"
    )


def pruned(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without the fields the schema does not declare (what the API server
    prunes when field validation does not reject them)."""
    out: dict[str, Any] = json_copy(dict(obj))
    for loc in reversed(unknown_locations(out)):  # later items first: list indexes hold
        node: Any = out
        for part in loc[:-1]:
            node = node[part]
        del node[loc[-1]]
    return out


# ----------------------------------------------------------------- admission


def _review(
    obj: dict[str, Any], old: dict[str, Any] | None, operation: str, namespace: str, name: str
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": c.GROUP, "version": c.VERSION, "kind": c.KIND},
        "resource": {"group": c.GROUP, "version": c.VERSION, "resource": c.PLURAL},
        "operation": operation,
        "namespace": namespace,
        "name": name,
        "object": obj,
        "dryRun": True,
        "userInfo": {"username": "icache-validate"},
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def defaulted(
    obj: dict[str, Any], old: dict[str, Any] | None, operation: str, namespace: str, name: str
) -> dict[str, Any]:
    """The object after the defaulting webhook's patch and the schema's defaults."""
    response = mutate_cachebackend(parse_review(_review(obj, old, operation, namespace, name)))
    answer = response["response"]
    patched = obj
    if answer.get("patch"):
        ops = json.loads(base64.b64decode(answer["patch"]))
        patched = jsonpatch.apply_patch(obj, ops)
    out: dict[str, Any] = judged_form(patched)
    return out


def schema_errors(obj: Mapping[str, Any]) -> list[Any]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [spec_type_error(spec)]
    return parse_spec(spec)[1]


def _causes(status: Mapping[str, Any]) -> list[dict[str, str]]:
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    return [
        {
            "field": str(x.get("field", "")),
            "reason": str(x.get("reason", "")),
            "message": str(x.get("message", "")),
        }
        for x in causes or []
        if isinstance(x, Mapping)
    ]


def judge(
    doc: Document,
    *,
    namespace: str | None,
    old: Document | None = None,
    field_validation: str = "Strict",
) -> DocumentVerdict:
    """The API server's answer to ``kubectl apply`` of ``doc`` (see module docstring)."""
    body = doc.body
    if not isinstance(body, dict) or not (
        doc.kind == c.KIND and doc.api_version.split("/", 1)[0] == c.GROUP
    ):
        what = f"{doc.kind or 'a document without a kind'}"
        return DocumentVerdict(doc, SKIPPED, note=f"{what} is not a CacheBackend: not judged")
    ns = str(doc.metadata.get("namespace") or namespace or DEFAULT_NAMESPACE)
    name = str(doc.metadata.get("name") or "")
    operation = "UPDATE" if old is not None else "CREATE"
    verdict = DocumentVerdict(doc, INVALID, operation=operation, namespace=ns, name=name)
    if doc.api_version != c.API_VERSION:
        verdict.stage, verdict.reason = "decode", "NotFound"
        verdict.message = f'no matches for kind "{c.KIND}" in version "{doc.api_version}"'
        return verdict
    if not name:
        verdict.stage, verdict.reason = "schema", "Invalid"
        verdict.message = (
            f'{QUALIFIED_KIND} "" is invalid: metadata.name: Required value: '
            "name or generateName is required"
        )
        return verdict

    obj = dict(body)
    obj.setdefault("metadata", {})
    obj["metadata"] = {**obj["metadata"], "namespace": ns}
    unknown = unknown_fields(obj)
    if unknown and field_validation == "Strict":
        verdict.stage, verdict.reason = "decode", "BadRequest"
        verdict.message = strict_decoding_message(unknown)
        return verdict
    if unknown and field_validation == "Warn":
        verdict.warnings += [f'unknown field "{p}"' for p in unknown]
    obj = pruned(obj)

    old_stored = None
    if old is not None:
        old_obj = {**old.body, "metadata": {**old.metadata, "namespace": ns}}
        old_obj = pruned(old_obj)
        old_stored = defaulted(judged_form(old_obj), None, "CREATE", ns, name)
    mutated = defaulted(judged_form(obj), old_stored, operation, ns, name)

    errors = schema_errors(mutated)
    if errors and old_stored is not None:
        # CRD validation ratcheting: an error the stored object already had is not new.
        known = {e.key() for e in schema_errors(old_stored)}
        errors = [e for e in errors if e.key() not in known]
    if errors:
        status = invalid_status(name, errors)
        verdict.stage, verdict.reason, verdict.message = "schema", "Invalid", status["message"]
        verdict.causes = _causes(status)
        return verdict

    review = _review(mutated, old_stored, operation, ns, name)
    answer = validate_cachebackend(parse_review(review))["response"]
    verdict.warnings += [str(w) for w in answer.get("warnings") or []]
    if not answer.get("allowed"):
        status = answer.get("status") or {}
        verdict.stage = "webhook"
        verdict.reason = str(status.get("reason") or "")
        verdict.message = (
            f'admission webhook "{VALIDATING_WEBHOOK}" denied the request: '
            f"{status.get('message', '')}"
        )
        verdict.causes = _causes(status)
        return verdict
    verdict.result = VALID
    verdict.defaulted = mutated
    return verdict


def judge_all(
    docs: Sequence[Document],
    old_docs: Sequence[Document],
    *,
    namespace: str | None,
    field_validation: str,
) -> list[DocumentVerdict]:
    def key(d: Document) -> tuple[str, str]:
        return (str(d.metadata.get("namespace") or namespace or DEFAULT_NAMESPACE), d.name)

    olds = {key(d): d for d in old_docs if d.kind == c.KIND}
    return [
        judge(d, namespace=namespace, old=olds.get(key(d)), field_validation=field_validation)
        for d in docs
    ]


# -------------------------------------------------------------------- output


def _label(v: DocumentVerdict) -> str:
    name = f"{v.namespace}/{v.name}" if v.name else (v.doc.name or "(no name)")
    return f"{(v.doc.kind or 'document').lower()} {name} ({v.doc.where})"


def validation_text_report(verdicts: Sequence[DocumentVerdict]) -> str:
    lines = []
    for v in verdicts:
        if v.result == SKIPPED:
            lines.append(f"skipped {_label(v)}: {v.note}")
            continue
        op = " (UPDATE)" if v.operation == "UPDATE" else ""
        lines.append(f"{v.result} {_label(v)}{op}")
        lines += [f"  Warning: {w}" for w in v.warnings]
        if v.result == INVALID:
            lines.append(f"  Error from server ({v.reason}): {v.message}")
            lines += [f"    {x['field']}: {x['message']}" for x in v.causes if x["field"]]
    lines.append(summary_line(verdicts))
    return "\n".join(lines) + "\n"


def summary(verdicts: Sequence[DocumentVerdict]) -> dict[str, int]:
    return {
        VALID: sum(v.result == VALID for v in verdicts),
        INVALID: sum(v.result == INVALID for v in verdicts),
        SKIPPED: sum(v.result == SKIPPED for v in verdicts),
        "warnings": sum(len(v.warnings) for v in verdicts),
    }


def summary_line(verdicts: Sequence[DocumentVerdict]) -> str:
    s = summary(verdicts)
    judged = s[VALID] + s[INVALID]
    if not judged:
        return f"no CacheBackend in the input ({s[SKIPPED]} other document(s) skipped)"
    return (
        f"{judged} CacheBackend(s): {s[VALID]} valid, {s[INVALID]} invalid, "
        f"{s['warnings']} warning(s); {s[SKIPPED]} other document(s) skipped"
    )


def validation_json_report(verdicts: Sequence[DocumentVerdict]) -> str:
    report = {
        "apiVersion": c.REPORT_API_VERSION,
        "kind": VALIDATION_REPORT_KIND,
        "documents": [v.report() for v in verdicts],
        "summary": summary(verdicts),
    }
    return json.dumps(report, indent=2) + "\n"


def exit_code(verdicts: Sequence[DocumentVerdict], warnings_as_errors: bool) -> int:
    s = summary(verdicts)
    return 1 if s[INVALID] or (warnings_as_errors and s["warnings"]) else 0


# ----------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        type=cli_types.input_path,
        metavar="FILE|DIR|-",
        help="manifests to judge: a file, a directory (recursive) or - for stdin; repeatable "
        "(default: none, required)",
    )
    parser.add_argument(
        "--old",
        action="append",
        type=cli_types.input_path,
        metavar="FILE|DIR",
        help="the objects as stored now: a document with the same namespace/name is judged as "
        "an UPDATE of it (only violations it introduces count); repeatable",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=cli_types.dns_label,
        help=f"namespace of documents that name none (default: {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "yaml", "json"),
        default="text",
        help="text: a verdict per document; yaml: the defaulted objects (verdicts on stderr); "
        "json: the report of docs/cli.md",
    )
    parser.add_argument(
        "--warnings-as-errors",
        action="store_true",
        help="exit 1 when any document has a warning, too",
    )
    parser.add_argument(
        "--field-validation",
        choices=FIELD_VALIDATION,
        default="Strict",
        help="unknown fields: Strict rejects them (kubectl's default), Warn warns, Ignore "
        "drops them",
    )


def run(args: argparse.Namespace) -> int:
    try:
        docs = read_inputs(args.filename)
        old_docs = read_inputs(args.old or [])
    except InputError as exc:
        print(f"icache validate: error: {exc}", file=sys.stderr)
        return 2
    verdicts = judge_all(
        docs, old_docs, namespace=args.namespace, field_validation=args.field_validation
    )
    if args.output == "json":
        sys.stdout.write(validation_json_report(verdicts))
    elif args.output == "yaml":
        objects = [v.defaulted for v in verdicts if v.defaulted is not None]
        sys.stdout.write("".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects))
        sys.stderr.write(validation_text_report(verdicts))
    else:
        sys.stdout.write(validation_text_report(verdicts))
    return exit_code(verdicts, args.warnings_as_errors)
