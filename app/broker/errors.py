"""The broker's own refusals, as problem errors: what a command that cannot be routed to an
operation is answered on its reply queue (beside being dead-lettered, `dead_letters.py`)."""

from __future__ import annotations

from app.errors import ProblemError


class UnknownCommand(ProblemError):
    status, code, title = 400, "UNKNOWN_COMMAND", "Unknown command type"


class MalformedCommand(ProblemError):
    status, code, title = 400, "MALFORMED_COMMAND", "Malformed command"
