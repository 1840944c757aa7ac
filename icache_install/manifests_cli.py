"""`icache manifests`: print the install manifests, rendered without kustomize.

``icache manifests | kubectl apply -f -`` installs the same objects as
``kubectl apply -k manifests/``. The kustomization in manifests/ is the one source:
tests/unit/test_kustomize_parity.py renders it with the real, pinned kustomize
(tests/tools/kustomize.sh) and fails unless this renderer prints the same objects in
the same order, so the two cannot drift. Prefer ``kubectl apply -k``; this path is
for hosts whose kubectl has no kustomize and for the worker image.

The renderer is deliberately tiny and refuses
what it does not implement instead of guessing. It supports, in a kustomization
(``kind: Kustomization``) or a component (``kind: Component``):

* ``resources``: YAML files (several documents each) and directories holding a
  kustomization; local paths only.
* ``components``: directories holding a ``kind: Component`` kustomization; applied
  to everything accumulated so far, as kustomize does.
* ``patches``: JSON6902 operation lists (``target`` required) and strategic-merge
  patches made of maps only (``$patch: delete`` removes the object; a ``null``
  value removes a key). ``target`` matches ``group``/``version``/``kind``/
  ``name``/``namespace`` exactly (no regular expressions, no label selectors).
  A strategic-merge patch containing a list is refused: kustomize merges some
  lists by key and this renderer would not.
* ``namespace``: set on every namespaced object; a ``Namespace`` object is renamed;
  ServiceAccount subjects of (Cluster)RoleBindings and webhook ``clientConfig.service``
  references follow the ServiceAccounts and Services they name, as kustomize's name
  references do.
* ``images``: ``name`` with ``newName``, ``newTag`` and/or ``digest``, in
  ``containers`` and ``initContainers`` lists.

Anything else (generators, labels, replicas, replacements, name prefixes, Helm
charts, remote resources, patch options) is an error that says so: use kustomize.

Objects come out in the order ``kubectl apply -k`` uses (kustomize's "legacy"
order: Namespace and CRDs first, webhook configurations last).

``--namespace`` goes one step further than kustomize's namespace transformer: every
string in which the kustomization's namespace appears as a whole DNS label or path
segment is rewritten too (the Pod webhook's namespaceSelector, cert-manager's
``inject-ca-from`` and the Certificate's DNS names), so nothing keeps pointing at
the old namespace. ``--image-tag`` retags every ``ghcr.io/inference-cache/*`` image.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import jsonpatch
import yaml

from shared.constants import INSTALL_NAMESPACE

Doc = dict[str, Any]

KUSTOMIZATION_FILES: Final = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS: Final = frozenset(
    {"apiVersion", "kind", "resources", "components", "namespace", "images", "patches"}
)
OUR_IMAGES: Final = "ghcr.io/inference-cache/"
VARIANTS: Final = {"default": ".", "cert-manager": "overlays/cert-manager"}

# Kinds kustomize treats as cluster-scoped (its builtin list, trimmed to what an
# install can contain); every other kind gets the namespace.
CLUSTER_SCOPED: Final = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterIssuer",
        "ClusterRole",
        "ClusterRoleBinding",
        "CSIDriver",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)

# kustomize's legacy apply order (api/resid/gvk.go): these kinds first, in this
# order, then every other kind, then these last.
ORDER_FIRST: Final = (
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
)
ORDER_LAST: Final = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class RenderError(Exception):
    """The kustomization uses something this renderer does not implement, or is broken."""


# --------------------------------------------------------------------------- loading


def find_kustomization(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise RenderError(f"no kustomization.yaml in {directory}")


def _load_yaml_documents(path: Path) -> list[Doc]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise RenderError(f"{path}: not YAML: {exc}") from exc
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion"):
            raise RenderError(f"{path}: every document must be an object with apiVersion and kind")
        if not (doc.get("metadata") or {}).get("name"):
            raise RenderError(f"{path}: a {doc['kind']} has no metadata.name")
    return docs


def _load_kustomization(directory: Path, expected_kind: str) -> Doc:
    path = find_kustomization(directory)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise RenderError(f"{path}: not a mapping")
    kind = data.get("kind", "Kustomization")
    if kind != expected_kind:
        raise RenderError(f"{path}: expected kind {expected_kind}, found {kind}")
    unsupported = sorted(set(data) - SUPPORTED_FIELDS)
    if unsupported:
        raise RenderError(
            f"{path}: this renderer does not support {', '.join(unsupported)}; use kustomize "
            "(kubectl apply -k)"
        )
    return data


def _is_remote(entry: str) -> bool:
    return "://" in entry or entry.startswith(("github.com/", "git@", "gitlab.com/"))


def resource_id(doc: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(group, kind, namespace, name): what kustomize calls a resource's id."""
    group = str(doc["apiVersion"]).rpartition("/")[0]
    meta = doc.get("metadata") or {}
    return group, str(doc["kind"]), str(meta.get("namespace") or ""), str(meta["name"])


def _add(docs: list[Doc], new: Iterable[Doc], origin: Path) -> None:
    seen = {resource_id(d) for d in docs}
    for doc in new:
        rid = resource_id(doc)
        if rid in seen:
            raise RenderError(f"{origin}: {rid[1]} {rid[3]} is already defined")
        seen.add(rid)
        docs.append(doc)


def build(directory: Path) -> list[Doc]:
    """Render the kustomization in ``directory`` (documents in input order)."""
    return _build(directory.resolve(), "Kustomization", [], frozenset())


def _build(
    directory: Path, kind: str, inherited: list[Doc], visiting: frozenset[Path]
) -> list[Doc]:
    if directory in visiting:
        raise RenderError(f"{directory}: kustomizations include each other")
    visiting = visiting | {directory}
    data = _load_kustomization(directory, kind)
    docs = list(inherited)
    for entry in data.get("resources") or []:
        if _is_remote(str(entry)):
            raise RenderError(f"{directory}: remote resource {entry} is not supported")
        path = (directory / str(entry)).resolve()
        if path.is_dir():
            _add(docs, _build(path, "Kustomization", [], visiting), path)
        elif path.is_file():
            _add(docs, _load_yaml_documents(path), path)
        else:
            raise RenderError(f"{directory}: resource {entry} does not exist")
    for entry in data.get("components") or []:
        path = (directory / str(entry)).resolve()
        if not path.is_dir():
            raise RenderError(f"{directory}: component {entry} is not a directory")
        docs = _build(path, "Component", docs, visiting)
    for patch in data.get("patches") or []:
        docs = apply_patch(docs, patch, directory)
    if data.get("namespace"):
        docs = set_namespace(docs, str(data["namespace"]))
    if data.get("images"):
        docs = set_images(docs, data["images"])
    return docs


# --------------------------------------------------------------------------- patches


def _target_matches(doc: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    unsupported = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unsupported:
        raise RenderError(f"patch target field(s) {', '.join(sorted(unsupported))} not supported")
    group, _, version = str(doc["apiVersion"]).rpartition("/")
    meta = doc.get("metadata") or {}
    actual = {
        "group": group,
        "version": version,
        "kind": doc["kind"],
        "name": meta.get("name"),
        "namespace": meta.get("namespace") or "",
    }
    return all(actual[key] == value for key, value in target.items())


def _merge(base: Any, patch: Any, where: str) -> Any:
    if isinstance(patch, list):
        raise RenderError(
            f"strategic-merge patch with a list at {where or '/'} is not supported "
            "(kustomize merges some lists by key); use a JSON6902 patch"
        )
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(base.get(key), value, f"{where}/{key}")
    return merged


def _strategic_merge(doc: Doc, patch: Doc) -> Doc | None:
    """``doc`` with ``patch`` merged in, or ``None`` when the patch deletes it."""
    if patch.get("$patch") == "delete":
        return None
    if "$patch" in patch:
        raise RenderError(f"$patch: {patch['$patch']} is not supported")
    body = {k: v for k, v in patch.items() if k not in ("apiVersion", "kind")}
    meta = {
        k: v
        for k, v in (body.pop("metadata", None) or {}).items()
        if k not in ("name", "namespace")
    }
    if meta:
        body["metadata"] = meta
    merged: Doc = _merge(doc, body, "")
    return merged


def apply_patch(docs: list[Doc], entry: Mapping[str, Any], directory: Path) -> list[Doc]:
    unsupported = set(entry) - {"path", "patch", "target"}
    if unsupported:
        raise RenderError(
            f"{directory}: patch field(s) {', '.join(sorted(unsupported))} not supported"
        )
    if "path" in entry:
        text = (directory / str(entry["path"])).read_text()
    elif "patch" in entry:
        text = str(entry["patch"])
    else:
        raise RenderError(f"{directory}: a patch needs path or patch")
    content = yaml.safe_load(text)
    target = entry.get("target")
    if isinstance(content, list):
        if not target:
            raise RenderError(f"{directory}: a JSON6902 patch needs a target")
        ops = jsonpatch.JsonPatch(content)
        out = []
        for doc in docs:
            if _target_matches(doc, target):
                try:
                    doc = ops.apply(doc)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise RenderError(f"{directory}: JSON6902 patch failed: {exc}") from exc
            out.append(doc)
        return out
    if not isinstance(content, dict):
        raise RenderError(f"{directory}: a patch must be a map or a list of operations")
    if not target:
        meta = content.get("metadata") or {}
        target = {"kind": content.get("kind"), "name": meta.get("name")}
        if meta.get("namespace"):
            target["namespace"] = meta["namespace"]
    result: list[Doc] = []
    matched = False
    for doc in docs:
        if _target_matches(doc, target):
            matched = True
            patched = _strategic_merge(doc, content)
            if patched is not None:
                result.append(patched)
        else:
            result.append(doc)
    if not matched and "target" not in entry:
        raise RenderError(f"{directory}: no resource matches the patch for {target}")
    return result


# --------------------------------------------------------------------------- namespace


def set_namespace(docs: list[Doc], namespace: str) -> list[Doc]:
    """kustomize's ``namespace:``: namespaced objects move, a Namespace is renamed, and
    ServiceAccount subjects / webhook Service references follow their targets."""
    service_accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    out = []
    for original in docs:
        doc = copy.deepcopy(original)
        kind = doc["kind"]
        if kind == "Namespace":
            doc["metadata"]["name"] = namespace
        elif kind not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            for subject in doc.get("subjects") or []:
                if (
                    subject.get("kind") == "ServiceAccount"
                    and subject.get("name") in service_accounts
                ):
                    subject["namespace"] = namespace
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in doc.get("webhooks") or []:
                service = (webhook.get("clientConfig") or {}).get("service")
                if service and service.get("name") in services:
                    service["namespace"] = namespace
        out.append(doc)
    return out


def rename_namespace(docs: list[Doc], old: str, new: str) -> list[Doc]:
    """Replace ``old`` wherever it is a whole DNS label or path segment of a string
    (``old``, ``svc.old.svc``, ``old/name``); map keys are left alone."""
    pattern = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(old)}(?![A-Za-z0-9-])")

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(new, value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return [walk(doc) for doc in docs]


# --------------------------------------------------------------------------- images


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """``name[:tag][@digest]`` -> (name, tag, digest); a registry port is not a tag."""
    rest, _, digest = image.partition("@")
    name, tag = rest, None
    slash, colon = rest.rfind("/"), rest.rfind(":")
    if colon > slash:
        name, tag = rest[:colon], rest[colon + 1 :]
    return name, tag, digest or None


def _containers(value: Any) -> Iterator[Doc]:
    if isinstance(value, dict):
        for key, child in value.items():
            if key in ("containers", "initContainers") and isinstance(child, list):
                yield from (c for c in child if isinstance(c, dict) and "image" in c)
            else:
                yield from _containers(child)
    elif isinstance(value, list):
        for child in value:
            yield from _containers(child)


def set_images(docs: list[Doc], images: Iterable[Mapping[str, Any]]) -> list[Doc]:
    rules: dict[str, Mapping[str, Any]] = {}
    for rule in images:
        unsupported = set(rule) - {"name", "newName", "newTag", "digest"}
        if unsupported:
            raise RenderError(f"images field(s) {', '.join(sorted(unsupported))} not supported")
        rules[str(rule["name"])] = rule
    out = []
    for original in docs:
        doc = copy.deepcopy(original)
        for container in _containers(doc):
            name, tag, digest = split_image(str(container["image"]))
            found = rules.get(name)
            if found is None:
                continue
            rule = found
            name = str(rule.get("newName") or name)
            if rule.get("digest"):
                container["image"] = f"{name}@{rule['digest']}"
                continue
            tag = str(rule["newTag"]) if rule.get("newTag") is not None else tag
            image = name + (f":{tag}" if tag else "")
            container["image"] = image + (f"@{digest}" if digest and not rule.get("newTag") else "")
        out.append(doc)
    return out


def retag_our_images(docs: list[Doc], tag: str) -> list[Doc]:
    names = {
        split_image(str(c["image"]))[0]
        for doc in docs
        for c in _containers(doc)
        if str(c["image"]).startswith(OUR_IMAGES)
    }
    return set_images(docs, [{"name": name, "newTag": tag} for name in sorted(names)])


# --------------------------------------------------------------------------- order


def apply_order(docs: list[Doc]) -> list[Doc]:
    """kustomize's legacy order; the kinds in between, and ties, by group, version,
    kind, namespace and name."""

    def key(doc: Doc) -> tuple[int, str, str, str, str, str]:
        kind = doc["kind"]
        if kind in ORDER_FIRST:
            rank = ORDER_FIRST.index(kind)
        elif kind in ORDER_LAST:
            rank = len(ORDER_FIRST) + 1 + ORDER_LAST.index(kind)
        else:
            rank = len(ORDER_FIRST)
        group, _, version = str(doc["apiVersion"]).rpartition("/")
        _, _, namespace, name = resource_id(doc)
        return rank, group, version, kind, namespace, name

    return sorted(docs, key=key)


# --------------------------------------------------------------------------- the command


def default_manifests_root() -> Path:
    """ICACHE_MANIFESTS_DIR (set in the images), else manifests/ of a source checkout."""
    env = os.environ.get("ICACHE_MANIFESTS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "manifests"


def kustomization_namespace(directory: Path) -> str | None:
    data = yaml.safe_load(find_kustomization(directory).read_text()) or {}
    namespace = data.get("namespace")
    return str(namespace) if namespace else None


def render(
    directory: Path, *, namespace: str | None = None, image_tag: str | None = None
) -> list[Doc]:
    """The objects ``kubectl apply -k directory`` would create, in apply order, with the
    namespace and our image tag optionally overridden."""
    docs = build(directory)
    if namespace:
        current = kustomization_namespace(directory)
        docs = (
            rename_namespace(docs, current, namespace)
            if current
            else set_namespace(docs, namespace)
        )
    if image_tag:
        docs = retag_our_images(docs, image_tag)
    return apply_order(docs)


def dump(docs: Iterable[Doc]) -> str:
    return "".join("---\n" + yaml.safe_dump(doc, sort_keys=False) for doc in docs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        default="default",
        help="default: certificates from `icache certs`; cert-manager: cert-manager issues them",
    )
    parser.add_argument(
        "--kustomization",
        type=Path,
        help="render this kustomization directory instead of a variant",
    )
    parser.add_argument(
        "--namespace", help=f"install into this namespace (default: {INSTALL_NAMESPACE})"
    )
    parser.add_argument("--image-tag", help="tag of the ghcr.io/inference-cache images")


def run(args: argparse.Namespace) -> int:
    directory = args.kustomization or default_manifests_root() / VARIANTS[args.variant]
    if not directory.is_dir():
        print(
            f"icache manifests: no manifests at {directory}; pass --kustomization DIR or set "
            "ICACHE_MANIFESTS_DIR (the images set it; a source checkout needs neither)",
            file=sys.stderr,
        )
        return 1
    if args.image_tag == "latest":
        print("icache manifests: warning: 'latest' is not a pinned version", file=sys.stderr)
    try:
        docs = render(directory, namespace=args.namespace, image_tag=args.image_tag)
    except (RenderError, OSError) as exc:
        print(f"icache manifests: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(f"# Rendered by `icache manifests` from {directory}\n")
    sys.stdout.write(dump(docs))
    return 0
