"""Every write to operations and their audit trail, as named verbs (reads: `reads.py`).

Three rules hold every write here together:
- the claim is an INSERT that lets the unique key decide races (never SELECT-then-INSERT):
  the key's row in `idempotency_keys`, and the operation only from the row inserted;
- every change of state goes through the state machine and is audited in the same
  statement (`_transition`, the one write path for owners);
- every write by an owner is conditional on its fencing token, so an owner that lost its
  lease (paused, slow, presumed dead) cannot overwrite the newer owner's work: the verb then
  returns None and the caller answers with the current state.
Times come from the database clock (`now()`), the one clock every process shares.

    claim          insert-first: RECEIVED then PROVIDER_REQUEST_SENT, with the claimant's lease
                   (`claim_guarded`: only if the kind's guard, read first, lets it)
    mark_sent      send / retry / resend -> PROVIDER_REQUEST_SENT, before the provider call
    record_final   complete / fail -> COMPLETED / FAILED, with the stored response
    defer          defer -> FAILED_RETRYABLE (certainly not processed)
    mark_unknown   lose -> UNKNOWN_REQUIRES_RECOVERY, with the next check scheduled
    fail_over      failover -> PROVIDER_REQUEST_SENT, the business object at its next
                   attempt, before that attempt's first send

Each verb is one statement (its SQL: `statements.py`): an owner's change and its audit row
are written together by a data-modifying CTE, so a verb is atomic on its own and costs one
round trip.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from psycopg.types.json import Jsonb

from app.db.database import Connection
from app.operations import reads, statements
from app.operations.states import MACHINE, State, Trigger
from app.operations.values import (
    Claimed,
    ClaimGuard,
    EventWrite,
    OwnedRef,
    Schedule,
    Snapshot,
    StoredResponse,
    SubjectWrite,
)
from app.tracing.spans import annotate, traceparent, transition

CLAIM_TRIGGER = "claim"
SEND_REASON = "calling the provider"
logger = logging.getLogger("payments.operations")


async def claim(
    conn: Connection,
    *,
    operation_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    fingerprint: str,
    owner: str,
    lease_s: float,
    key_ttl_s: int,
    subject: SubjectWrite | None = None,
    send_reason: str | None = None,
) -> Claimed | Snapshot | None:
    """Insert the operation, claimed and sent, with the owner's lease; or read the winner's.

    With `subject`, the business object is written in the same statement (its row is
    created only if the claim wins). Returns `Claimed` (the owner's reference and the
    database time of the claim, the rows' `created_at`); when the key is taken, the
    operation its row names, as this statement saw the key's row, read in the same
    statement on the day the row names (`operation_on_day`: one partition planned); None
    when the key's row is not visible to the statement yet (its claim committed while this
    one waited on it: read it again).

    ON CONFLICT DO NOTHING on the key's row (`idempotency_keys`, whose primary key is the
    scoped key), then the operation from the row inserted, its `created_at` the key row's
    `operation_created_at`: a concurrent duplicate waits for the winner's transaction and
    then inserts nothing, and reads the winner's operation through the key's row, by id and
    `created_at` (`statements.py`). Only the winner goes on to
    create its business object (`subject`, whose row points at the operation) and call the
    provider. Both edges
    (claim -> RECEIVED, send -> PROVIDER_REQUEST_SENT) are the state machine's and are
    audited; `send_reason` is the send edge's reason (which provider, when the operation has
    a choice).
    """
    claimed, _ = await claim_guarded(
        conn,
        operation_id=operation_id,
        tenant_id=tenant_id,
        operation_name=operation_name,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        owner=owner,
        lease_s=lease_s,
        key_ttl_s=key_ttl_s,
        subject=subject,
        send_reason=send_reason,
    )
    return claimed


async def claim_guarded(
    conn: Connection,
    *,
    operation_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    fingerprint: str,
    owner: str,
    lease_s: float,
    key_ttl_s: int,
    subject: SubjectWrite | None = None,
    send_reason: str | None = None,
    guard: ClaimGuard | None = None,
) -> tuple[Claimed | Snapshot | None, tuple[Any, ...] | None]:
    """`claim`, and with `guard` checked first in the same statement (`ClaimGuard`): what
    `claim` returns, and the guard's row as the statement read it (None: no row, or no
    guard). A claim its guard refuses inserts nothing, and returns the key's row as `claim`
    does when the key is taken.
    """
    sent = MACHINE.next_state(State.RECEIVED, Trigger.SEND)
    params = {
        "id": operation_id,
        "tenant_id": tenant_id,
        "operation_name": operation_name,
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
        "lease_s": lease_s,
        "actor": owner,
        "received": State.RECEIVED.value,
        "sent": sent.value,
        "claim": CLAIM_TRIGGER,
        "send": Trigger.SEND.value,
        "send_reason": send_reason or SEND_REASON,
        "key_ttl_s": key_ttl_s,
        # The claiming request's trace context (None when not traced), for whoever acts on
        # the operation later in another trace to link to it.
        "traceparent": traceparent(),
        **(subject.params if subject else {}),
        **(guard.params if guard else {}),
    }
    on_day = await reads.reads_on_day(conn)
    sql = statements.claim_sql(
        statements.subject_sql(subject), guard.sql if guard else None, on_day=on_day
    )
    row = await (await conn.execute(sql, params)).fetchone()
    assert row is not None, "the claim's SELECT always returns its one row"
    won, at, *rest = row
    width = guard.width if guard else 0
    guarded, existing = tuple(rest[:width]), rest[width:]
    if won:
        annotate(operation_id=str(operation_id), fence=1, transition="claim")
        # The operation's `created_at` is its key row's `operation_created_at`, the same
        # `now()` of this statement that it returns as `at`.
        ref = OwnedRef(
            id=operation_id, tenant_id=tenant_id, created_at=at, fence=1, state=sent, attempts=0
        )
        claimed: Claimed | Snapshot | None = Claimed(ref, at)
    elif existing[0] is None:
        # The key's row is not in the statement's snapshot: read it again.
        claimed = None
    elif on_day:
        # The key is taken: its operation, read by this statement on its key row's day.
        claimed = reads.snapshot_of(existing)
    else:
        # Before migration 0034: the operation, read next on the day the key's row names.
        claimed = await reads.snapshot_on_day(
            conn,
            existing[0],
            tenant_id=tenant_id,
            created_at=existing[1],
            key_ttl_s=key_ttl_s,
        )
    # No row for the guard: its columns are all NULL, `ok` first among them.
    return claimed, (guarded if guard and guarded[0] is not None else None)


async def mark_sent(
    conn: Connection, ref: OwnedRef, trigger: Trigger, *, actor: str, lease_s: float
) -> OwnedRef | None:
    """PROVIDER_REQUEST_SENT (send, retry or resend), committed before the provider call.

    It renews the lease, fenced: an owner that spent part of its lease on a lookup starts
    the resend with a whole lease ahead of it, longer than the call.
    """
    values = {"lease_s": lease_s}
    return await _transition(conn, "mark_sent", ref, trigger, actor, SEND_REASON, values)


async def record_final(
    conn: Connection,
    ref: OwnedRef,
    trigger: Trigger,
    *,
    actor: str,
    reason: str,
    stored: StoredResponse,
    subject: SubjectWrite | None = None,
    event: EventWrite | None = None,
) -> OwnedRef | None:
    """COMPLETED or FAILED, with the response every later request with the key replays.

    With `subject`, the business object's outcome is written in the same statement, and
    only if this owner's write lands; with `event`, so is the outcome's event (the outbox).
    """
    values = {
        "response_status": stored.status,
        "response_headers": Jsonb(stored.headers),
        "response_body": stored.body.decode(),
    }
    return await _transition(
        conn, "record_final", ref, trigger, actor, reason, values, subject, event
    )


async def defer(conn: Connection, ref: OwnedRef, *, actor: str, reason: str) -> OwnedRef | None:
    """FAILED_RETRYABLE: certainly not processed; the client's retry drives it again."""
    return await _transition(conn, "defer", ref, Trigger.DEFER, actor, reason, {})


async def mark_unknown(
    conn: Connection,
    ref: OwnedRef,
    *,
    actor: str,
    reason: str,
    schedule: Schedule,
    event: EventWrite | None = None,
) -> OwnedRef | None:
    """UNKNOWN_REQUIRES_RECOVERY, with the next check and attempts the policy decided.

    `event` (the needs-attention event, when the schedule flags the operation) is written in
    the same statement; the outbox keeps one per operation, so only the first flag emits.
    """
    values = {
        "attempts": schedule.attempts,
        "delay_s": schedule.delay_s,
        "needs_attention": schedule.needs_attention,
    }
    return await _transition(
        conn, "mark_unknown", ref, Trigger.LOSE, actor, reason, values, event=event
    )


async def fail_over(
    conn: Connection,
    ref: OwnedRef,
    *,
    actor: str,
    reason: str,
    lease_s: float,
    subject: SubjectWrite | None = None,
) -> OwnedRef | None:
    """PROVIDER_REQUEST_SENT at the next attempt, committed before that attempt is sent.

    `subject` moves the business object to its next attempt in the same fenced statement:
    every request a provider may ever see is preceded by a durable record naming its key,
    so recovery looks the new attempt up too. The lease is renewed for the new send.
    """
    values = {"lease_s": lease_s}
    return await _transition(
        conn, "fail_over", ref, Trigger.FAILOVER, actor, reason, values, subject
    )


async def _transition(
    conn: Connection,
    verb: str,
    ref: OwnedRef,
    trigger: Trigger,
    actor: str,
    reason: str,
    values: dict[str, Any],
    subject: SubjectWrite | None = None,
    event: EventWrite | None = None,
) -> OwnedRef | None:
    """Fire `trigger` through the state machine and write it, fenced; None if fenced out.

    The UPDATE matches only while the fence and the state are what the owner last saw: if a
    newer owner took over, nothing is written, the audit row included. Every write of the
    statement is scoped by the operation's tenant (`ref.tenant_id`) and names its day
    (`ref.created_at`: `statements.py`).
    """
    new_state = MACHINE.next_state(ref.state, trigger)
    params = {
        "id": ref.id,
        "tenant_id": ref.tenant_id,
        "created_at": ref.created_at,
        "reason": reason,
        **values,
        **_audit(ref.state, new_state, trigger.value, actor, reason, ref.fence),
        **(subject.params if subject else {}),
        **(event.params if event else {}),
    }
    sql = statements.transition_sql(
        verb, statements.subject_sql(subject), event.ctes if event else ()
    )
    row = await (await conn.execute(sql, params, prepare=statements.PREPARED)).fetchone()
    fields: dict[str, Any] = {"operation_id": str(ref.id), "fence": ref.fence}
    if row is None:
        logger.info("fenced out: a newer owner holds the operation", extra={"fields": fields})
        return None
    fields |= {"from_state": ref.state.value, "to_state": new_state.value}
    fields |= {"trigger": trigger.value, "actor": actor}
    transition(ref.state.value, new_state.value, trigger.value, fence=ref.fence)
    logger.info("operation transition", extra={"fields": fields})
    return replace(ref, state=new_state, attempts=int(row[0]))


def _audit(
    from_state: State | None, to_state: State, trigger: str, actor: str, reason: str, fence: int
) -> dict[str, Any]:
    """The parameters of the audit row a verb writes with its change."""
    return {
        "from_state": None if from_state is None else from_state.value,
        "to_state": to_state.value,
        "trigger": trigger,
        "actor": actor,
        "reason": reason,
        "fence": fence,
    }
