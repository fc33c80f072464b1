"""Operators' reads of the inbox: its events newest first (by state, by provider), one event
with its body, how many wait to be applied and how many contradicted a final outcome (the
backlog gauges').

The list walks the primary key backwards (`id` is an identity, so the newest row has the
highest) and pages on with the last id seen. The body is left out of the list: it is
the provider's, of any size, and only the detail carries it. No signature is kept, so
none can be shown.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.database import Connection
from app.provider_events.rows import PENDING, EventState

MAX_PAGE = 100
# Ids are a bigint identity: anything larger is no event's.
MAX_ID = 2**63 - 1

_COLUMNS = """
    id, provider, event_id, type, provider_key, state, reason, attempts, received_at,
    applied_at, operation_id
"""
LIST_SQL = f"""
    SELECT {_COLUMNS} FROM provider_events
    WHERE (%(state)s::text IS NULL OR state = %(state)s)
      AND (%(provider)s::text IS NULL OR provider = %(provider)s)
      AND (%(after)s::bigint IS NULL OR id < %(after)s)
    ORDER BY id DESC
    LIMIT %(limit)s
"""
DETAIL_SQL = f"SELECT {_COLUMNS}, body FROM provider_events WHERE id = %(id)s"
# Through the partial index ix_provider_events_due, which holds exactly these rows: the
# gauge's reading costs what is waiting, not what the inbox has kept over time.
_PENDING_STATES = ", ".join(f"'{state.value}'" for state in PENDING)
PENDING_SQL = (
    f"SELECT state, count(*) FROM provider_events WHERE state IN ({_PENDING_STATES}) GROUP BY state"
)
# Through the partial index ix_provider_events_contradicted: those rows alone (until the
# retention deletes them with the events done with).
CONTRADICTED_SQL = (
    f"SELECT count(*) FROM provider_events WHERE state = '{EventState.CONTRADICTED.value}'"
)


@dataclass(frozen=True)
class InboxEvent:
    """One kept event as operators see it, without its body."""

    id: int
    provider: str
    event_id: str
    type: str
    provider_key: str | None
    state: EventState
    reason: str | None
    attempts: int
    received_at: datetime
    applied_at: datetime | None
    operation_id: uuid.UUID | None


@dataclass(frozen=True)
class InboxFilter:
    """Which events to list: one state, one provider (None: any), after the id `after`."""

    state: EventState | None = None
    provider: str | None = None
    after: int | None = None


async def events(
    conn: Connection, flt: InboxFilter, *, limit: int
) -> tuple[list[InboxEvent], bool]:
    """Up to `limit` events matching `flt`, newest first; and whether more follow."""
    params = {
        "state": None if flt.state is None else flt.state.value,
        "provider": flt.provider,
        "after": flt.after,
        "limit": limit + 1,
    }
    rows = await (await conn.execute(LIST_SQL, params)).fetchall()
    return [_event(row) for row in rows[:limit]], len(rows) > limit


async def event(conn: Connection, event_id: int) -> tuple[InboxEvent, dict[str, Any]] | None:
    """The event of id `event_id` and its body as the provider sent it; None if none."""
    row = await (await conn.execute(DETAIL_SQL, {"id": event_id})).fetchone()
    if row is None:
        return None
    return _event(row[:-1]), row[-1]


async def pending_by_state(conn: Connection) -> dict[str, int]:
    """How many events wait to be applied, received and parked (zeros included)."""
    counts = {state.value: 0 for state in PENDING}
    for state, count in await (await conn.execute(PENDING_SQL)).fetchall():
        counts[str(state)] = int(count)
    return counts


async def contradicted(conn: Connection) -> int:
    """How many kept events contradicted the final outcome of their operation."""
    row = await (await conn.execute(CONTRADICTED_SQL)).fetchone()
    return 0 if row is None else int(row[0])


def parse_id(text: str) -> int | None:
    """The inbox id in `text` (decimal digits, in range); None if it is none."""
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 1 <= value <= MAX_ID else None


def _event(row: Any) -> InboxEvent:
    values = list(row)
    values[5] = EventState(values[5])
    return InboxEvent(*values)
