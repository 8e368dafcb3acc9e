"""Errors that end a command with one line and exit code 2."""

from __future__ import annotations

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""
