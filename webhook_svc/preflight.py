"""What every `icache webhook` worker would find wrong, found once by the parent before
it forks them (icache_cli/main.py runs :func:`check` before ``run``): one line and exit
code 2 instead of the same error printed, as a run-time failure, by each worker."""

from __future__ import annotations

import argparse
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from cli_support.habits import UsageError
from kubeio.access import load_configuration
from webhook_svc.backend_files import BackendFileError, load_backends


def check(args: argparse.Namespace) -> None:
    """The TLS pair, the address to listen on, the CacheBackend files of embedded mode
    and the Kubernetes configuration of live mode."""
    if not args.insecure:
        if not (args.tls_cert_file and args.tls_key_file):
            raise UsageError("--tls-cert-file and --tls-key-file are required unless --insecure")
        check_tls_pair(args.tls_cert_file, args.tls_key_file)
    if args.host is not None:
        check_listen_address(args.host, args.port)
    if args.backends_from:
        check_backend_files(args.backends_from)
    else:
        load_configuration(args.kubeconfig)


def check_tls_pair(cert: Path, key: Path) -> None:
    """The certificate and key load as a serving pair, as every worker will load them."""
    try:
        x509.load_pem_x509_certificates(cert.read_bytes())
    except ValueError:
        raise UsageError(f"--tls-cert-file {cert}: not a PEM certificate") from None
    try:
        serialization.load_pem_private_key(key.read_bytes(), password=None)
    except TypeError:
        raise UsageError(
            f"--tls-key-file {key}: the key is encrypted; the webhook needs it unencrypted"
        ) from None
    except ValueError:
        raise UsageError(f"--tls-key-file {key}: not a PEM private key") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key))
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise UsageError(
                f"--tls-key-file {key} does not match --tls-cert-file {cert}"
            ) from None
        raise UsageError(
            f"--tls-cert-file {cert} and --tls-key-file {key}: cannot serve TLS with them "
            f"({exc.reason or exc})"
        ) from None


def check_listen_address(host: str, port: int) -> None:
    """``host`` resolves to an address to bind (an IP, or a name this machine resolves)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise UsageError(
            f"--host {host!r}: not an address this machine can listen on ({reason}); "
            "give an IP address such as 0.0.0.0, :: or 127.0.0.1"
        ) from None


def check_backend_files(directory: Path) -> None:
    """Every file of ``--backends-from`` parses: a broken one is refused at start rather
    than served as if it held no CacheBackend."""
    try:
        load_backends(directory, default_namespace="")
    except BackendFileError as exc:
        raise UsageError(f"--backends-from {directory}: {exc}") from None
