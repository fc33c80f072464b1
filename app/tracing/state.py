"""Whether this process traces: decided once, at start, by `app.tracing.setup.configure`.

Every helper of the hot path reads `ENABLED` first and does nothing more when it is off, so
a process that does not trace pays one attribute read per call site and nothing else.
"""

from __future__ import annotations


class _State:
    __slots__ = ("enabled", "statements")

    def __init__(self) -> None:
        self.enabled = False
        # Each SQL statement a span (unless OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=psycopg).
        self.statements = False


STATE = _State()


def enabled() -> bool:
    """Whether this process traces (set once, at start)."""
    return STATE.enabled


def statements() -> bool:
    """Whether this process traces each SQL statement (set once, at start)."""
    return STATE.enabled and STATE.statements
