"""The `Prefer: wait=N` request preference (RFC 7240)."""

from __future__ import annotations

from collections.abc import Sequence


def preferred_wait_s(values: Sequence[str], *, cap_s: float) -> float:
    """Seconds the client is willing to wait, capped; 0 when it expressed no preference."""
    for header in values:
        for preference in header.split(","):
            name, _, value = preference.strip().partition("=")
            if name.strip().lower() != "wait":
                continue
            value = value.split(";", 1)[0].strip().strip('"')
            if value.isdigit():
                return min(float(value), cap_s)
    return 0.0
