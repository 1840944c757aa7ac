"""`icache crd`: print the CacheBackend CRD generated from the models."""

from __future__ import annotations

import argparse
import sys

from shared.api.crd import crd_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    sys.stdout.write(crd_yaml())
    return 0
