"""Every write to operations and their audit trail, as named verbs (reads: `reads.py`).

Three rules hold every write here together:
- the claim is an INSERT that lets the unique key decide races (never SELECT-then-INSERT);
- every change of state goes through the state machine and is audited in the same
  statement (`_transition`, the one write path for owners);
- every write by an owner is conditional on its fencing token, so an owner that lost its
  lease (paused, slow, presumed dead) cannot overwrite the newer owner's work: the verb then
  returns None and the caller answers with the current state.
Times come from the database clock (`now()`), the one clock every process shares.

    claim          insert-first: RECEIVED then PROVIDER_REQUEST_SENT, with the claimant's lease
    take_over      one operation whose lease is gone: fence N -> N+1, a new lease
    claim_due      the worker's batch of the same, FOR UPDATE SKIP LOCKED
    mark_sent      send / retry / resend -> PROVIDER_REQUEST_SENT, before the provider call
    record_final   complete / fail -> COMPLETED / FAILED, with the stored response
    defer          defer -> FAILED_RETRYABLE (certainly not processed)
    mark_unknown   lose -> UNKNOWN_REQUIRES_RECOVERY, with the next check scheduled

Each verb is one statement: an owner's change and its audit row are written together by a
data-modifying CTE, so a verb is atomic on its own and costs one round trip.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from psycopg.types.json import Jsonb

from app.db.database import Connection
from app.operations.refs import OwnedRef, Schedule, Snapshot, StoredResponse
from app.operations.states import MACHINE, State, Trigger

CLAIM_TRIGGER = "claim"
logger = logging.getLogger("payments.operations")

_AUDIT = """
    INSERT INTO operation_transitions
        (operation_id, from_state, to_state, trigger, actor, reason, fence)
    SELECT id, %(from_state)s, %(to_state)s, %(trigger)s, %(actor)s, %(reason)s, %(fence)s
    FROM changed
"""

# The claim commits RECEIVED and PROVIDER_REQUEST_SENT at once, each audited: the request
# that wins the key goes straight to the provider call, and the operation is never left
# RECEIVED by a live first owner. Recovering a PROVIDER_REQUEST_SENT operation is a lookup,
# then a resend with the same key, so nothing is lost by sending right after the claim.
_CLAIM = """
    WITH changed AS (
        INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                                state, payment_id, lease_owner, lease_expires_at, fence)
        VALUES (%(id)s, %(tenant_id)s, %(operation_name)s, %(idempotency_key)s,
                %(fingerprint)s, %(sent)s, %(payment_id)s, %(actor)s,
                now() + make_interval(secs => %(lease_s)s), 1)
        ON CONFLICT (tenant_id, operation_name, idempotency_key) DO NOTHING
        RETURNING id
    ), audit AS (
        INSERT INTO operation_transitions
            (operation_id, from_state, to_state, trigger, actor, reason, fence)
        SELECT id, edge.from_state, edge.to_state, edge.trigger, %(actor)s, edge.reason, 1
        FROM changed,
             (VALUES (1, NULL, %(received)s::text, %(claim)s::text, 'request received'),
                     (2, %(received)s::text, %(sent)s::text, %(send)s::text,
                      'calling the provider'))
             AS edge (step, from_state, to_state, trigger, reason)
        ORDER BY edge.step
    )
    SELECT id FROM changed
"""

# A new owner: a fence one higher than the last owner's, and a new lease. Only where nobody
# holds a live lease; a row another transaction holds is skipped, not waited for.
_TAKE_OVER = """
    UPDATE operations
    SET fence = fence + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
    WHERE id = (SELECT id FROM operations WHERE id = %(id)s FOR UPDATE SKIP LOCKED)
      AND fence = %(fence)s
      AND state NOT IN ('COMPLETED', 'FAILED')
      AND (lease_expires_at IS NULL OR lease_expires_at <= now())
    RETURNING fence, state, attempts
"""

# The worker's batch: in-flight operations whose owner's lease ran out (the owner crashed
# or hung), then unknown operations whose next check has come. FOR UPDATE SKIP LOCKED lets
# any number of workers claim at once without waiting on, or sharing, a row.
_CLAIM_DUE = """
    WITH stale AS (
        SELECT id FROM operations
        WHERE state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY lease_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT id FROM operations
        WHERE state = 'UNKNOWN_REQUIRES_RECOVERY'
          AND next_check_at <= now()
          AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY next_check_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id FROM (SELECT id, 0 AS rank FROM stale UNION ALL SELECT id, 1 FROM due) ids
        ORDER BY rank
        LIMIT %(limit)s
    )
    UPDATE operations
    SET fence = fence + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
    WHERE id IN (SELECT id FROM picked)
    RETURNING id, fence, state, attempts
"""

# Recording any outcome ends the owner's lease: the next owner needs no takeover wait.
_RELEASE = "lease_owner = NULL, lease_expires_at = NULL"

_SETS: dict[str, str] = {
    # Renewing the lease: a lookup may have spent part of it before a resend.
    "mark_sent": "lease_expires_at = now() + make_interval(secs => %(lease_s)s)",
    "record_final": f"""{_RELEASE}, needs_attention = false, next_check_at = NULL,
        last_error = NULL, completed_at = now(), response_status = %(response_status)s,
        response_headers = %(response_headers)s, response_body = %(response_body)s""",
    "defer": f"{_RELEASE}, last_error = %(reason)s",
    "mark_unknown": f"""{_RELEASE}, last_error = %(reason)s, attempts = %(attempts)s,
        next_check_at = now() + make_interval(secs => %(delay_s)s),
        needs_attention = needs_attention OR %(needs_attention)s""",
}


def _transition_sql(sets: str) -> str:
    return f"""
        WITH changed AS (
            UPDATE operations SET state = %(to_state)s, updated_at = now(), {sets}
            WHERE id = %(id)s AND fence = %(fence)s AND state = %(from_state)s
            RETURNING id, attempts
        ), audit AS ({_AUDIT})
        SELECT attempts FROM changed
    """


_TRANSITIONS = {verb: _transition_sql(sets) for verb, sets in _SETS.items()}


async def claim(
    conn: Connection,
    *,
    operation_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    fingerprint: str,
    payment_id: uuid.UUID,
    owner: str,
    lease_s: float,
) -> OwnedRef | None:
    """Insert the operation, claimed and sent, with the owner's lease; None if the key exists.

    ON CONFLICT DO NOTHING on the scoped key: a concurrent duplicate waits for the winner's
    transaction and then inserts nothing. Only the winner goes on to create the payment and
    call the provider. Both edges (claim -> RECEIVED, send -> PROVIDER_REQUEST_SENT) are
    the state machine's and are audited.
    """
    sent = MACHINE.next_state(State.RECEIVED, Trigger.SEND)
    params = {
        "id": operation_id,
        "tenant_id": tenant_id,
        "operation_name": operation_name,
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
        "payment_id": payment_id,
        "lease_s": lease_s,
        "actor": owner,
        "received": State.RECEIVED.value,
        "sent": sent.value,
        "claim": CLAIM_TRIGGER,
        "send": Trigger.SEND.value,
    }
    if (await (await conn.execute(_CLAIM, params)).fetchone()) is None:
        return None
    return OwnedRef(id=operation_id, fence=1, state=sent, attempts=0)


async def take_over(
    conn: Connection, snapshot: Snapshot, *, owner: str, lease_s: float
) -> OwnedRef | None:
    """Become the operation's owner if nobody holds a live lease on it; None otherwise.

    A conditional UPDATE on the fence the caller saw: of two contenders only one can move
    the fence from N to N+1, the other matches no row.
    """
    op = snapshot.operation
    params = {"id": op.id, "fence": op.fence, "owner": owner, "lease_s": lease_s}
    row = await (await conn.execute(_TAKE_OVER, params)).fetchone()
    if row is None:
        return None
    fence, state, attempts = row
    return OwnedRef(id=op.id, fence=int(fence), state=State(state), attempts=int(attempts))


async def claim_due(conn: Connection, *, owner: str, lease_s: float, limit: int) -> list[OwnedRef]:
    """Take recovery ownership of up to `limit` operations that need it."""
    params = {"owner": owner, "lease_s": lease_s, "limit": limit}
    rows = await (await conn.execute(_CLAIM_DUE, params)).fetchall()
    return [
        OwnedRef(id=row_id, fence=int(fence), state=State(state), attempts=int(attempts))
        for row_id, fence, state, attempts in rows
    ]


async def mark_sent(
    conn: Connection, ref: OwnedRef, trigger: Trigger, *, actor: str, lease_s: float
) -> OwnedRef | None:
    """PROVIDER_REQUEST_SENT (send, retry or resend), committed before the provider call.

    It renews the lease, fenced: an owner that spent part of its lease on a lookup starts
    the resend with a whole lease ahead of it, longer than the call.
    """
    values = {"lease_s": lease_s}
    return await _transition(conn, "mark_sent", ref, trigger, actor, "calling the provider", values)


async def record_final(
    conn: Connection,
    ref: OwnedRef,
    trigger: Trigger,
    *,
    actor: str,
    reason: str,
    stored: StoredResponse,
) -> OwnedRef | None:
    """COMPLETED or FAILED, with the response every later request with the key replays."""
    values = {
        "response_status": stored.status,
        "response_headers": Jsonb(stored.headers),
        "response_body": stored.body.decode(),
    }
    return await _transition(conn, "record_final", ref, trigger, actor, reason, values)


async def defer(conn: Connection, ref: OwnedRef, *, actor: str, reason: str) -> OwnedRef | None:
    """FAILED_RETRYABLE: certainly not processed; the client's retry drives it again."""
    return await _transition(conn, "defer", ref, Trigger.DEFER, actor, reason, {})


async def mark_unknown(
    conn: Connection, ref: OwnedRef, *, actor: str, reason: str, schedule: Schedule
) -> OwnedRef | None:
    """UNKNOWN_REQUIRES_RECOVERY, with the next check and attempts the policy decided."""
    values = {
        "attempts": schedule.attempts,
        "delay_s": schedule.delay_s,
        "needs_attention": schedule.needs_attention,
    }
    return await _transition(conn, "mark_unknown", ref, Trigger.LOSE, actor, reason, values)


async def _transition(
    conn: Connection,
    verb: str,
    ref: OwnedRef,
    trigger: Trigger,
    actor: str,
    reason: str,
    values: dict[str, Any],
) -> OwnedRef | None:
    """Fire `trigger` through the state machine and write it, fenced; None if fenced out.

    The UPDATE matches only while the fence and the state are what the owner last saw: if a
    newer owner took over, nothing is written, the audit row included.
    """
    new_state = MACHINE.next_state(ref.state, trigger)
    params = {
        "id": ref.id,
        "reason": reason,
        **values,
        **_audit(ref.state, new_state, trigger.value, actor, reason, ref.fence),
    }
    row = await (await conn.execute(_TRANSITIONS[verb], params)).fetchone()
    fields: dict[str, Any] = {"operation_id": str(ref.id), "fence": ref.fence}
    if row is None:
        logger.info("fenced out: a newer owner holds the operation", extra={"fields": fields})
        return None
    fields |= {"from_state": ref.state.value, "to_state": new_state.value}
    fields |= {"trigger": trigger.value, "actor": actor}
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
