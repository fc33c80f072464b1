"""All SQL on the inbox: keep a received event once; the operators' counts by state.

Keeping an event is one statement: an INSERT that does nothing when the provider's event
id is there already (the unique (provider, event_id): of two deliveries racing, the second
waits for the first's commit and inserts nothing), and, for a duplicate, whether the kept
body is the same JSON as this one (`jsonb` equality: member order and spacing aside).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from app.db.database import Connection
from app.provider_events.errors import ProviderEventInvalid
from app.provider_events.event import ReceivedEvent
from app.provider_events.rows import EventState

# The comparison reads the statement's snapshot: a duplicate whose first delivery committed
# while this statement ran is not seen there, and `same_body` is NULL (not known).
_KEEP = """
    WITH incoming AS (SELECT %(body)s::jsonb AS body),
    kept AS (
        INSERT INTO provider_events (provider, event_id, type, provider_key, body)
        SELECT %(provider)s, %(event_id)s, %(type)s, %(provider_key)s, incoming.body
        FROM incoming
        ON CONFLICT (provider, event_id) DO NOTHING
        RETURNING id
    )
    SELECT (SELECT id FROM kept) AS id,
           (SELECT e.body = incoming.body FROM provider_events AS e, incoming
             WHERE e.provider = %(provider)s AND e.event_id = %(event_id)s) AS same_body
"""
_COUNTS = "SELECT state, count(*) FROM provider_events GROUP BY state"


@dataclass(frozen=True)
class Kept:
    """What keeping an event came to: the new row's id, or a duplicate (`id` None) whose
    kept body is the same (`same_body` True), another (False) or not known (None)."""

    id: int | None
    same_body: bool | None

    @property
    def duplicate(self) -> bool:
        return self.id is None


async def keep(conn: Connection, *, provider: str, event: ReceivedEvent) -> Kept:
    """Insert `event` unless `provider`'s event of its id is kept already."""
    params = {
        "provider": provider,
        "event_id": event.event_id,
        "type": event.type,
        "provider_key": event.provider_key,
        "body": event.body,
    }
    try:
        cursor = await conn.execute(_KEEP, params)
    except psycopg.errors.DataError:
        # JSON that `jsonb` cannot hold: a \u0000 escape, a lone surrogate.
        raise ProviderEventInvalid("the body is JSON this service cannot store") from None
    row = await cursor.fetchone()
    assert row is not None
    return Kept(id=row[0], same_body=row[1])


async def counts_by_state(conn: Connection) -> dict[EventState, int]:
    """How many events the inbox holds in each state (every state, zeros included)."""
    cursor = await conn.execute(_COUNTS)
    counts = dict.fromkeys(EventState, 0)
    for state, count in await cursor.fetchall():
        counts[EventState(state)] = count
    return counts
