"""Time as the service writes it: aware UTC datetimes, RFC 3339 strings with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """RFC 3339 UTC timestamp with microseconds, e.g. `2026-01-02T03:04:05.000006Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
