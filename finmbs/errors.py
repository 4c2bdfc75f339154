"""The root of finmbs's own exceptions (this module imports nothing of finmbs, so every layer can use it).

Every exception class finmbs defines derives from `FinmbsError` (and keeps its other bases, e.g.
ValueError, so `except ValueError` still catches a bad config); the command line turns any of them that
reaches it into one error line and the class's `exit_code` (finmbs/commands/_common.py `cli_errors`).
"""

from __future__ import annotations


class FinmbsError(Exception):
    """An error finmbs raises on purpose (bad input, a failed model call, a busy run folder): its message is
    the whole story, one line for the user; `exit_code` is what the command line exits with."""

    exit_code = 2
