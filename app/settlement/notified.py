"""A provider's notification about a final operation: whether it contradicts what we
recorded, and the discrepancy it becomes when it does (the inbox's apply step asks:
`app/provider_events/contradictions.py`).

A notification carries the provider's record as its lookup by key answers it: the same fact
settlement's daily run reads of the provider's books. So it is compared the way that run
compares a record (`app/settlement/matching.py`'s `judge`, on settlement's own reading of
the record, `books.read_record`, against our record as settlement reads it,
`repository.ours_by_key`): its outcome's category (made: succeeded or authorized; or not:
declined) against the outcome we recorded, and its amount and currency against ours. What
the record came to after the event was made (refunded, captured, voided of a charge) is not
the event's to say, and is not compared. A difference is written to settlement's queue by
settlement's own writer (`repository.write_items`), one item per (key, kind) as every item
is: a duplicate of the event, or another event saying the same, finds the item and adds
none. The operation and its business object are never written: a notification is not an
overwrite.

Not compared (the event is applied as before, and the run judges the record): a record
settlement does not compare (a void: it moves no money), a record this module cannot read
as settlement reads one, and a record under another key or provider than the one our
outcome came from (a payment's decline at an attempt it failed over from: the run's strays).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC
from typing import Any

from app.db.database import Connection
from app.provider.keys import split_attempt_key
from app.provider_events.contradictions import Notified
from app.settlement import repository
from app.settlement.books import BooksUnavailable, read_record
from app.settlement.matching import judge
from app.settlement.repository import Finding
from app.settlement.rows import RecordType

# Where an item says it came from (its `theirs.source`), beside the record the event carried.
SOURCE = "provider_event"

_RECORD = "SELECT event_id, body -> 'data' -> 'object' FROM provider_events WHERE id = %(id)s"


@dataclass(frozen=True)
class Contradiction:
    """What an event contradicts: the items it makes (one per kind of difference), and the
    inbox's reason in words."""

    findings: tuple[Finding, ...]
    reason: str


async def find(
    conn: Connection, event: Notified, *, record_name: str, operation_id: uuid.UUID
) -> Contradiction | None:
    """The contradiction between `event` and the final outcome its operation holds, or None:
    it agrees, or is not one to compare (the module's docstring)."""
    if record_name not in {t.value for t in RecordType}:
        return None
    record_type = RecordType(record_name)
    row = await (await conn.execute(_RECORD, {"id": event.inbox_id})).fetchone()
    if row is None or not isinstance(row[1], dict):
        return None
    event_id, body = str(row[0]), row[1]
    try:
        theirs = read_record(record_type, body)
    except BooksUnavailable:
        return None
    # The event is the record as it was made: what became of it since is not compared.
    theirs = replace(theirs, amount_refunded_minor=None, amount_captured_minor=None, voided=None)
    split = split_attempt_key(event.provider_key)
    stored = event.provider_key if split is None else split[0]
    ours = (await repository.ours_by_key(conn, record_type, [stored])).get(stored)
    if (
        ours is None
        or ours.operation_id != operation_id
        or ours.key != event.provider_key
        or ours.provider != event.provider
        or theirs.provider_key != event.provider_key
    ):
        return None
    verdict = judge(record_type, ours, theirs, settled=True)
    if not verdict.differences:
        return None
    shown: dict[str, Any] = {
        **theirs.snapshot(),
        "source": SOURCE,
        "provider_event": {"id": event.inbox_id, "event_id": event_id, "type": event.type},
    }
    day = ours.created_at.astimezone(UTC).date()
    findings = tuple(
        Finding(
            day=day,
            record_type=record_type,
            provider=event.provider,
            provider_key=event.provider_key,
            kind=difference.kind,
            detail=f"provider event {event_id} ({event.type}): {difference.detail}",
            ours=ours,
            theirs=shown,
        )
        for difference in verdict.differences
    )
    said = "; ".join(f"{d.kind.value}: {d.detail}" for d in verdict.differences)
    return Contradiction(findings, f"contradicts the final outcome we hold ({said})")


async def queue(conn: Connection, contradiction: Contradiction, *, actor: str) -> None:
    """Write `contradiction`'s items to settlement's queue (in the caller's transaction)."""
    first = contradiction.findings[0]
    await repository.write_items(
        conn,
        first.record_type,
        first.provider,
        [first.provider_key],
        contradiction.findings,
        actor=actor,
        resolve_unfound=False,
    )


class NotifiedRecords:
    """Settlement's answer to the inbox (`Contradictions`): a notification's record judged
    against ours, a contradiction queued as a discrepancy."""

    async def queue_if_contradicted(
        self,
        conn: Connection,
        event: Notified,
        *,
        record_name: str,
        operation_id: uuid.UUID,
        actor: str,
    ) -> str | None:
        contradiction = await find(conn, event, record_name=record_name, operation_id=operation_id)
        if contradiction is None:
            return None
        await queue(conn, contradiction, actor=actor)
        return contradiction.reason
