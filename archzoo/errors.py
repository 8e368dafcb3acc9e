"""Errors that end a command with one line and exit code 2."""

from __future__ import annotations

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""


class RunFailed(Exception):
    """A run started from Python (``archzoo.run``) whose ranks did not all end cleanly."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
