"""`icache manifests`: print the install manifests, as kustomize renders them.

The install is the kustomization in manifests/ (``kubectl apply -k manifests/``).
For hosts whose kubectl has no kustomize, and for the worker image, each variant is
rendered by the pinned kustomize into manifests/rendered/ (``make manifests``, i.e.
tests/tools/render-manifests.sh); tests/unit/install/test_kustomize_parity.py fails while a
file there differs from what kustomize builds now. This command prints one of those
files, so there is no second renderer to keep in step::

    icache manifests | kubectl apply -f -          # = kubectl apply -f manifests/rendered/install.yaml
    icache manifests --variant cert-manager | kubectl apply -f -

Two edits are offered on top, for installs that do not keep an overlay of their own:

* ``--namespace NS`` rewrites the install namespace wherever it is a whole DNS label
  or path segment of a string (metadata.namespace, the Namespace itself, RBAC
  subjects, the webhook Service reference, the Pod webhook's namespaceSelector,
  cert-manager's ``inject-ca-from`` and the Certificate's DNS names), so nothing keeps
  pointing at the old namespace; kustomize's ``namespace:`` alone would leave the
  strings behind.
* ``--image-tag T`` retags every ``ghcr.io/inference-cache/*`` image, as an overlay's
  ``images: [{name: ..., newTag: T}]`` does (the parity test compares the two).
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

import yaml

from cli_support import arg_types as cli_types
from shared.constants import INSTALL_NAMESPACE

Doc = dict[str, Any]

OUR_IMAGES: Final = "ghcr.io/inference-cache/"
# variant -> (rendered file in manifests/rendered/, the kustomization it is built from)
VARIANTS: Final = {
    "default": ("install.yaml", "."),
    "cert-manager": ("install-cert-manager.yaml", "overlays/cert-manager"),
    # The default install plus ServiceMonitors, the PrometheusRule and the Grafana
    # dashboard (components/monitoring; needs the Prometheus Operator's CRDs).
    "monitoring": ("install-monitoring.yaml", "overlays/monitoring"),
}


class RenderError(Exception):
    """The rendered manifests are missing or unreadable."""


def default_manifests_root() -> Path:
    """ICACHE_MANIFESTS_DIR (set in the worker image), else manifests/ of a checkout."""
    env = os.environ.get("ICACHE_MANIFESTS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "manifests"


def dist_file(variant: str = "default", root: Path | None = None) -> Path:
    return (root or default_manifests_root()) / "rendered" / VARIANTS[variant][0]


def load(variant: str = "default", root: Path | None = None) -> list[Doc]:
    """The objects of the rendered variant, in kustomize's apply order."""
    path = dist_file(variant, root)
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise RenderError(
            f"no rendered manifests at {path} ({exc.strerror}); pass --manifests-dir or set "
            "ICACHE_MANIFESTS_DIR (the worker image sets it; a source checkout needs neither)"
        ) from exc
    except yaml.YAMLError as exc:
        raise RenderError(f"{path}: not YAML: {exc}") from exc
    if not all(isinstance(d, dict) and d.get("kind") for d in docs):
        raise RenderError(f"{path}: every document must be an object with a kind")
    return docs


# --------------------------------------------------------------------------- --namespace


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


# --------------------------------------------------------------------------- --image-tag


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


def retag_our_images(docs: list[Doc], tag: str) -> list[Doc]:
    """Every ghcr.io/inference-cache/* image at ``tag`` (a digest goes: it pinned the
    old tag), as kustomize's ``images: newTag`` does."""
    out = copy.deepcopy(docs)
    for container in _containers(out):
        name, _, _ = split_image(str(container["image"]))
        if name.startswith(OUR_IMAGES):
            container["image"] = f"{name}:{tag}"
    return out


# --------------------------------------------------------------------------- the command


def render_manifests(
    variant: str = "default",
    *,
    root: Path | None = None,
    namespace: str | None = None,
    image_tag: str | None = None,
) -> list[Doc]:
    """The objects ``kubectl apply -k`` of ``variant`` creates, in apply order, with the
    namespace and our image tag optionally changed."""
    docs = load(variant, root)
    if namespace and namespace != INSTALL_NAMESPACE:
        docs = rename_namespace(docs, INSTALL_NAMESPACE, namespace)
    if image_tag:
        docs = retag_our_images(docs, image_tag)
    return docs


def dump_documents(docs: Iterable[Mapping[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(dict(doc), sort_keys=False) for doc in docs)


# An OCI tag: word characters, '.' and '-', not starting with either, 128 at most.
_TAG_RE: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def image_tag_argument(value: str) -> str:
    if not _TAG_RE.match(value):
        raise argparse.ArgumentTypeError(
            f"invalid image tag {value!r} (letters, digits, '_', '.', '-'; at most 128)"
        )
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        default="default",
        help="'default': certificates from `icache certs`; 'cert-manager': cert-manager "
        "issues them",
    )
    parser.add_argument(
        "--manifests-dir",
        type=cli_types.existing_dir,
        metavar="DIR",
        help="the manifests/ directory holding rendered/ (default: ICACHE_MANIFESTS_DIR, else the "
        "checkout's)",
    )
    parser.add_argument(
        "--namespace",
        type=cli_types.dns_label,
        help=f"install into this namespace (default: {INSTALL_NAMESPACE})",
    )
    parser.add_argument(
        "--image-tag",
        type=image_tag_argument,
        metavar="TAG",
        help="tag of the ghcr.io/inference-cache images (default: the rendered manifests' tag)",
    )


def run(args: argparse.Namespace) -> int:
    if args.image_tag == "latest":
        print("icache manifests: warning: 'latest' is not a pinned version", file=sys.stderr)
    root = args.manifests_dir
    if root is not None and not dist_file(args.variant, root).is_file():
        # A missing file named on the command line: bad input, exit 2.
        print(
            f"icache manifests: error: --manifests-dir {root}: no rendered manifests in it "
            f"(rendered/{VARIANTS[args.variant][0]}): give the manifests/ directory of a "
            "checkout, or ICACHE_MANIFESTS_DIR of the worker image",
            file=sys.stderr,
        )
        return 2
    if not args.namespace and not args.image_tag:
        # Nothing to change: the file kustomize wrote, byte for byte.
        try:
            sys.stdout.write(dist_file(args.variant, root).read_text())
        except OSError:
            pass
        else:
            return 0
    try:
        docs = render_manifests(
            args.variant, root=root, namespace=args.namespace, image_tag=args.image_tag
        )
    except RenderError as exc:
        print(f"icache manifests: {exc}", file=sys.stderr)
        return 1
    source = dist_file(args.variant, root)
    sys.stdout.write(f"# Rendered by `icache manifests` from {source}\n")
    sys.stdout.write(dump_documents(docs))
    return 0
