"""Applying stored provider events: the worker's job over the inbox.

An event names what the provider made by the key it was sent under. It is applied through
the one path every outcome takes: the event makes its operation be reconciled now, by the
same takeover and the same `Reconciler` recovery uses (look the record up at the provider
under the operation's derived key, record it with the fenced transitions, or send again),
so a notification is never a second write path, and a forged-but-signed or garbled body
can move nothing the provider does not confirm. What an event finds:

    no kind makes its type          rejected (kept, with the reason)
    no operation under its key      parked, looked for again with backoff (the event may
                                    come before our claim's commit); after
                                    `MATCH_WINDOW_S`, parked for good: settlement's daily
                                    comparison of the books finds what it was about
    the operation is final, and     applied: nothing to write
      the event agrees (or is not
      one to compare)
    the operation is final, and     contradicted: a discrepancy in settlement's queue, in
      the event contradicts its     the transaction that marks the event; the operation
      outcome                       and its business object are not written (below)
    FAILED_RETRYABLE                applied: it waits for its client, whose retry sends again
                                    under the same key and records what the provider holds
    a live owner holds it           parked until its lease is over: the owner's own outcome,
                                    or the next check, settles it (never raced)
    anything else                   taken over and reconciled now: applied once final,
                                    else parked and tried again with backoff

The claim leases each event (`next_attempt_at` moved ahead by two operation leases,
PAYMENTS_LEASE_S: longer than a reconciliation, a lookup and perhaps a resend, each bounded
by the provider timeout the lease outlives) with `FOR UPDATE SKIP LOCKED`, so any number of
workers apply side by side and an event whose worker died is taken again once that is over.
A worker still at it then meets the second at the operation's takeover: only one of them
reconciles the operation.

A notification that contradicts a final outcome is a discrepancy, never an overwrite: the
event's record (what the provider said: declined against our succeeded, succeeded against
our failed, another amount or currency) is judged against ours as settlement's daily run
judges a record, and each difference is an item of settlement's queue, which operators
resolve as they resolve the run's (`Contradictions`, answered by
`app/settlement/notified.py`). An item is one per (key, kind of difference): a duplicate of
the event, or another event saying the same, adds none.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.database import Connection, Database
from app.jobs.loop import Pace
from app.operations import leases, reads
from app.operations.outcomes import Final
from app.operations.states import TERMINAL, State
from app.provider_events.contradictions import Contradictions, Notified
from app.recovery.reconcile import Reconciler

logger = logging.getLogger("payments.provider_events")

# How long an event whose key names no operation is looked for, from its arrival.
MATCH_WINDOW_S = 86_400.0
# The longest wait between two looks at a parked event.
MAX_BACKOFF_S = 60.0
# An event's hold on a worker, in operation leases (see the module's docstring).
CLAIM_LEASES = 2

# Events applied at once by one worker, and claimed at a time: each is a reconciliation (a
# lookup at the provider, perhaps a send), half recovery's default window; the provider
# client keeps a connection for each, beside recovery's (`provider_connections`).
APPLY_PACE = Pace.windowed(32, 16)

_CLAIM = """
    UPDATE provider_events e
    SET attempts = e.attempts + 1, next_attempt_at = now() + make_interval(secs => %(lease_s)s)
    WHERE e.id IN (
        SELECT id FROM provider_events
        WHERE state IN ('received', 'parked') AND next_attempt_at <= now()
        ORDER BY next_attempt_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
    RETURNING e.id, e.provider, e.type, e.provider_key, e.received_at, e.attempts
"""
_APPLIED = """
    UPDATE provider_events
    SET state = 'applied', reason = %(reason)s, operation_id = %(operation_id)s,
        applied_at = now(), next_attempt_at = NULL
    WHERE id = %(id)s
"""
_PARKED = """
    UPDATE provider_events
    SET state = 'parked', reason = %(reason)s, operation_id = %(operation_id)s,
        next_attempt_at = CASE WHEN %(retry_s)s::float8 IS NULL THEN NULL
                               ELSE now() + make_interval(secs => %(retry_s)s) END
    WHERE id = %(id)s
"""
_CONTRADICTED = """
    UPDATE provider_events
    SET state = 'contradicted', reason = %(reason)s, operation_id = %(operation_id)s,
        applied_at = NULL, next_attempt_at = NULL
    WHERE id = %(id)s
"""
_REJECTED = """
    UPDATE provider_events
    SET state = 'rejected', reason = %(reason)s, next_attempt_at = NULL
    WHERE id = %(id)s
"""
_AGE = "SELECT extract(epoch FROM now() - %(at)s::timestamptz)"


@dataclass(frozen=True)
class StoredEvent:
    """An event of the inbox, as the apply job claimed it."""

    id: int
    provider: str
    type: str
    provider_key: str | None
    received_at: datetime
    attempts: int


def backoff_s(attempts: int) -> float:
    """How long a parked event waits before its next look: doubling from 1 s, capped."""
    return float(min(MAX_BACKOFF_S, 2 ** max(attempts - 1, 0)))


class EventApplication:
    """The worker's job: applies stored provider events (see the module's docstring)."""

    name = "provider_events"

    def __init__(
        self,
        *,
        db: Database,
        reconcilers: Mapping[str, Reconciler[Any, Any]],
        contradictions: Contradictions,
        lease_s: float,
        key_ttl_s: int,
        worker: str,
    ):
        self._db = db
        # By what the provider calls a record (`OperationKind.record_name`): a "charge.*"
        # event is the payments' kind's, "refund.*" the refunds', and so on.
        self._by_record = {r.driver.kind.record_name: r for r in reconcilers.values()}
        self._contradictions = contradictions
        self._lease_s = lease_s
        self._claim_lease_s = CLAIM_LEASES * lease_s
        self._key_ttl_s = key_ttl_s
        self._actor = f"provider-event:{worker}"

    async def claim(self, limit: int) -> Sequence[StoredEvent]:
        async with self._db.connection() as conn:
            rows = await (
                await conn.execute(_CLAIM, {"limit": limit, "lease_s": self._claim_lease_s})
            ).fetchall()
        return [StoredEvent(*row) for row in rows]

    async def handle(self, event: StoredEvent) -> None:
        record = event.type.split(".", 1)[0]
        reconciler = self._by_record.get(record)
        if reconciler is None or event.provider_key is None:
            await self._write(_REJECTED, event, reason=f"no operation kind makes a {record!r}")
            return
        async with self._db.connection() as conn:
            operation_id = await reconciler.driver.kind.operation_for_key(conn, event.provider_key)
            if operation_id is None:
                row = await (await conn.execute(_AGE, {"at": event.received_at})).fetchone()
                age_s = float(row[0]) if row is not None else 0.0
            else:
                snapshot = await reads.get_snapshot(
                    conn, operation_id, key_ttl_s=self._key_ttl_s, with_history=False
                )
        if operation_id is None:
            if age_s >= MATCH_WINDOW_S:
                reason = "no operation under its key within the match window; left to settlement"
                await self._write(_PARKED, event, reason=reason, retry_s=None)
            else:
                reason = "no operation under its key yet"
                await self._write(_PARKED, event, reason=reason, retry_s=backoff_s(event.attempts))
            return
        assert snapshot is not None, "an operation found by its key exists"
        state = snapshot.state
        if state in TERMINAL:
            await self._final(event, record, operation_id, state)
            return
        if state is State.FAILED_RETRYABLE:
            reason = (
                "the operation waits for its client's retry, which records what the provider holds"
            )
            await self._write(_APPLIED, event, operation_id, reason=reason)
            return
        async with self._db.connection() as conn:
            ref = await leases.take_over(conn, snapshot, owner=self._actor, lease_s=self._lease_s)
        if ref is None:
            reason = "its owner holds a live lease; its outcome or the next check settles it"
            await self._write(_PARKED, event, operation_id, reason=reason, retry_s=backoff_s(1))
            return
        outcome = await reconciler.reconcile(ref, actor=self._actor)
        if isinstance(outcome, Final):
            await self._write(
                _APPLIED, event, operation_id, reason="reconciled: " + type(outcome).__name__
            )
            return
        reason = f"reconciled, not settled yet ({type(outcome).__name__})"
        await self._write(
            _PARKED, event, operation_id, reason=reason, retry_s=backoff_s(event.attempts)
        )

    async def _final(
        self, event: StoredEvent, record: str, operation_id: uuid.UUID, state: State
    ) -> None:
        """An event about a final operation: applied when it agrees, contradicted (and its
        discrepancy queued, in the same transaction) when it does not."""
        assert event.provider_key is not None, "only an event with a key finds an operation"
        notified = Notified(
            inbox_id=event.id,
            provider=event.provider,
            type=event.type,
            provider_key=event.provider_key,
        )
        async with self._db.transaction() as conn:
            contradiction = await self._contradictions.queue_if_contradicted(
                conn, notified, record_name=record, operation_id=operation_id, actor=self._actor
            )
            if contradiction is None:
                reason = f"the operation is {state.value} already"
                await self._write(_APPLIED, event, operation_id, reason=reason, conn=conn)
            else:
                await self._write(
                    _CONTRADICTED, event, operation_id, reason=contradiction, conn=conn
                )
        if contradiction is not None:
            # What an operator is to look at: the queue has it, the log says it once.
            logger.warning(
                "provider event contradicts a final outcome; queued as a discrepancy",
                extra={"fields": {"event": event.id, "type": event.type, "reason": contradiction}},
            )

    async def _write(
        self,
        sql: str,
        event: StoredEvent,
        operation_id: uuid.UUID | None = None,
        *,
        reason: str,
        retry_s: float | None = None,
        conn: Connection | None = None,
    ) -> None:
        params = {
            "id": event.id,
            "reason": reason,
            "operation_id": operation_id,
            "retry_s": retry_s,
        }
        if conn is None:
            async with self._db.connection() as own:
                await own.execute(sql, params)
        else:
            await conn.execute(sql, params)
        logger.info(
            "provider event handled",
            extra={
                "fields": {
                    "event": event.id,
                    "provider": event.provider,
                    "type": event.type,
                    "operation_id": None if operation_id is None else str(operation_id),
                    "reason": reason,
                }
            },
        )
