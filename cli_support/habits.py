"""What the subcommand modules share with the console script (icache_cli/main.py)
without importing it: the usage error and the client-library quieting."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input found after parsing (a file's content, a combination of flags):
    one line on stderr and exit code 2."""


def quiet_client_libraries() -> None:
    """For a command that prints its own progress and errors (doctor, certs): the HTTP
    client's retry warnings and deprecation notices are not for its user; a failure
    ends as one line (describe_failure) or one finding."""
    import logging
    import warnings

    logging.getLogger("urllib3").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="urllib3")
