"""Helpers for tests that parse the command lines of images and Deployments."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_support import arg_types as cli_types

# The argument types that look at the file system: a pod's mounted certificate or
# token does not exist on the machine running the tests.
PATH_TYPES = ("existing_file", "existing_dir", "pem_certificate_file", "pem_key_file")


def paths_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every path-valued flag a plain Path, for parsers built after this call."""
    for name in PATH_TYPES:
        monkeypatch.setattr(cli_types, name, Path)
