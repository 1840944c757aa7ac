"""Argument types for every `icache` subcommand: a bad value fails at parse time.

Each function takes the flag's string and returns the parsed value, or raises
``argparse.ArgumentTypeError`` with a message that says what is wrong; argparse
prefixes the flag (``argument --port: ...``) and :mod:`icache_cli.main` prints it as one
line with exit code 2. Files are checked here, before a process starts anything (the
webhook forks its workers only after parsing, so a missing certificate is reported
once, by the parent).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")
STDIN: Final = "-"

# RFC 1123 label (a Namespace name): lower-case alphanumerics and '-', 63 at most.
_DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# RFC 1123 subdomain (most object names): dot-separated labels, 253 at most.
_DNS_SUBDOMAIN_RE: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def log_level(value: str) -> str:
    """A logging level name, any case; returned lower-case."""
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid log level {value!r} (choose from {', '.join(LOG_LEVELS)})"
        )
    return level


def optional_text(value: str) -> str | None:
    """A string where empty (an unset environment variable's usual spelling) means unset."""
    return value.strip() or None


def dns_label(value: str) -> str:
    """A Namespace name: an RFC 1123 label."""
    if not _DNS_LABEL_RE.match(value):
        raise argparse.ArgumentTypeError(
            f"invalid namespace {value!r}: a namespace must be an RFC 1123 label (lower-case "
            "letters, digits and '-', starting and ending with a letter or digit, at most 63)"
        )
    return value


def dns_subdomain(value: str) -> str:
    """An object name: an RFC 1123 subdomain."""
    if len(value) > 253 or not _DNS_SUBDOMAIN_RE.match(value):
        raise argparse.ArgumentTypeError(
            f"invalid name {value!r}: must be an RFC 1123 subdomain (lower-case letters, "
            "digits, '-' and '.', at most 253)"
        )
    return value


def optional_dns_subdomain(value: str) -> str:
    """An object name, or '' (the object is skipped)."""
    return value if value == "" else dns_subdomain(value)


def _number(value: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(value)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{value!r} is not {noun}") from None


def positive_int(value: str) -> int:
    number = int(_number(value, int))
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least 1")
    return number


def non_negative_int(value: str) -> int:
    number = int(_number(value, int))
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must not be negative")
    return number


def port(value: str) -> int:
    number = int(_number(value, int))
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (0-65535)")
    return number


def positive_float(value: str) -> float:
    number = float(_number(value, float))
    if not number > 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"{value!r} must be greater than 0")
    return number


def non_negative_float(value: str) -> float:
    number = float(_number(value, float))
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must not be negative")
    return number


def http_url(value: str) -> str:
    """An http:// or https:// URL with a host (and a numeric port, if any)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - urlsplit checks the port when it is read
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an http:// or https:// URL (e.g. http://server:8080)"
        )
    return value


def optional_http_url(value: str) -> str:
    """An http(s) URL, or '' (the feature it configures is off)."""
    return value if value == "" else http_url(value)


def existing_file(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: not a regular file")
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{value}: cannot read it ({exc.strerror})") from None
    return path


def existing_dir(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value}: no such directory")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: not a directory")
    return path


def input_path(value: str) -> str:
    """``-`` (standard input), a file or a directory (read recursively)."""
    if value == STDIN:
        return value
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value}: no such file or directory")
    if not (path.is_file() or path.is_dir()):
        raise argparse.ArgumentTypeError(f"{value}: not a file or directory")
    return str(path)


def _pem_file(value: str, markers: tuple[str, ...], what: str) -> Path:
    path = existing_file(value)
    try:
        text = path.read_bytes().decode("ascii", errors="replace")
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{value}: cannot read it ({exc.strerror})") from None
    if not any(f"-----BEGIN {marker}-----" in text for marker in markers):
        raise argparse.ArgumentTypeError(f"{value}: no PEM {what} in it")
    return path


def pem_certificate_file(value: str) -> Path:
    """A readable file holding a PEM certificate."""
    return _pem_file(value, ("CERTIFICATE",), "certificate")


def pem_key_file(value: str) -> Path:
    """A readable file holding a PEM private key (PKCS#8, PKCS#1 or SEC1)."""
    return _pem_file(value, ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"), "private key")


def checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argument type from a parser that raises ValueError on bad input."""

    def convert(value: str) -> T:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert
