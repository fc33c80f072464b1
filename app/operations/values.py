"""The operations record's plain values, passed between its verbs and every layer above.

    OperationName                 what an operation does (`operations.operation_name`)
    OperationRow, TransitionRow   rows as read
    OwnedRef, DueRef, Claimed     an owner's reference (its fence), a worker's, a claim's
    Snapshot                      an operation as a read sees it (lease live, key expired)
    StoredResponse                the answer stored with a final outcome
    SubjectWrite, EventWrite      the business object's and the event's SQL, handed to a verb
    ClaimGuard                    what a claim checks in its own statement before it inserts
    Schedule                      when recovery checks next, and whether it needs attention

The repository produces them and every layer above passes them on; none does I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from app.operations.states import State


class OperationName(StrEnum):
    """What an operation does; part of the scoped key (tenant, operation, key)."""

    CREATE_PAYMENT = "create_payment"
    CREATE_REFUND = "create_refund"
    CAPTURE_PAYMENT = "capture_payment"
    VOID_PAYMENT = "void_payment"


@dataclass(frozen=True)
class OperationRow:
    """One row of `operations`, as read."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    operation_name: str
    idempotency_key: str | None
    fingerprint: str
    state: str
    lease_owner: str | None
    lease_expires_at: datetime | None
    fence: int
    attempts: int
    next_check_at: datetime | None
    needs_attention: bool
    last_error: str | None
    response_status: int | None
    response_headers: dict[str, Any] | None
    response_body: str | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    response_expired_at: datetime | None
    key_released_at: datetime | None
    # The ids of what the operation acts on, as its kind's table holds them (`payment_id`,
    # `refund_id`: the `operation_links` view), when the read asked for them.
    links: dict[str, str] | None = None


# The record's own columns (the links are read from the kinds' tables, when asked for).
OPERATION_COLUMNS = ", ".join(f.name for f in fields(OperationRow) if f.name != "links")


@dataclass(frozen=True)
class TransitionRow:
    """One audited state change, as read."""

    id: int
    from_state: str | None
    to_state: str
    trigger: str
    actor: str
    reason: str | None
    fence: int
    created_at: datetime


@dataclass(frozen=True)
class OwnedRef:
    """What an owner knows of the operation it holds: enough to make fenced writes.

    `fence` is the token the owner got when it took the operation; every write it makes
    matches only while the row still carries that token and `state`. `tenant_id` is the
    operation's tenant: every write names it too, so each statement of an owner is scoped
    to the one tenant whose rows it touches (on Citus, routed to one shard group:
    docs/scaling.md). `created_at` is the operation's `created_at`, its day: every write
    and read by the owner names it too (`AND created_at = %(created_at)s`), so on
    `operations` partitioned by day it reads the operation's one partition, not every
    day's (docs/scaling.md "Time partitions"). It is filled from the row that made the
    reference (the claim's key row, the takeover's or the worker's claim's `RETURNING`),
    never from a clock: a reference with another day matches nothing, as a stale fence.
    """

    id: uuid.UUID
    tenant_id: uuid.UUID
    created_at: datetime
    fence: int
    state: State
    attempts: int


@dataclass(frozen=True)
class DueRef:
    """An operation a worker took for recovery, with its name (which driver reconciles it)."""

    operation_name: str
    ref: OwnedRef


@dataclass(frozen=True)
class Snapshot:
    """An operation as read, with the flags computed on the database clock."""

    operation: OperationRow
    lease_live: bool
    key_expired: bool
    # The audited transitions, oldest first, when the read asked for them.
    history: tuple[TransitionRow, ...] = ()

    @property
    def state(self) -> State:
        return State(self.operation.state)


@dataclass(frozen=True)
class StoredResponse:
    """The answer recorded with a final outcome, replayed byte for byte to every retry."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Claimed:
    """The claim won: the owner's reference, and the database time of the claim."""

    ref: OwnedRef
    at: datetime


@dataclass(frozen=True)
class SubjectWrite:
    """A write to the operation's business object, made in the same statement as the verb.

    `sql` is one data-modifying statement that runs only when the operation's own write
    lands: it reads the CTE `changed` (the operation's `id`, empty when fenced out), as in
    `INSERT ... SELECT ... FROM changed` or `UPDATE ... WHERE EXISTS (SELECT FROM changed)`;
    a transition's statement also has `audit`, its audit row's `id` and `created_at`.
    Its parameters are prefixed `s_` so they never meet the verb's own, but for the verb's
    `%(tenant_id)s`, the operation's tenant, which every UPDATE here matches its row on
    (`AND tenant_id = %(tenant_id)s`): the statement stays within one tenant. A transition's
    statement also offers the verb's `%(created_at)s`, the operation's day: an UPDATE of the
    operation's own payment, created by the same claim statement with the same
    `created_at`, matches on it too, so it reads that payment's day alone; a write to an
    object of another day (a refund's payment) must not use it. `also` holds more
    such statements when the object spans tables (a refund and its payment), all written in
    the same statement, under the same condition.
    """

    sql: str
    params: dict[str, Any]
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimGuard:
    """What a claim checks in its own statement before it inserts the operation.

    `sql` is a SELECT of at most one row, run first as the CTE `guard`; it may lock what it
    reads (`FOR NO KEY UPDATE`: held until the statement commits, and a lock that waited
    returns the row as its last writer left it). Its first column, `ok`, says whether the
    claim may go on: the operation is inserted only from a row that is ok, so a claim the
    guard refuses stores nothing. Its parameters are prefixed `g_`; the business object's
    write may read `guard` besides `changed`. The statement returns the row, its `width`
    columns, as the guard read it.
    """

    sql: str
    params: dict[str, Any]
    width: int


@dataclass(frozen=True)
class EventWrite:
    """An event for the outbox, written in the same statement as the verb's outcome.

    `ctes` are data-modifying CTEs, `(name, sql)`, appended after the verb's own: the first
    reads `changed` (empty when the owner was fenced out, so nothing is written), later ones
    may read earlier ones. Parameters are prefixed `e_`. The operations record knows no
    events table: the SQL comes from `app/events/outbox.py`.
    """

    ctes: tuple[tuple[str, str], ...]
    params: dict[str, Any]


@dataclass(frozen=True)
class Schedule:
    """When recovery looks at an unknown operation again, as decided by the recovery policy."""

    attempts: int
    delay_s: float
    needs_attention: bool


def stored_response(operation: OperationRow) -> StoredResponse:
    """The answer a terminal operation recorded; `ValueError` if it holds none (expired)."""
    if operation.response_status is None or operation.response_body is None:
        raise ValueError(f"operation {operation.id} has no stored response")
    return StoredResponse(
        status=operation.response_status,
        headers=dict(operation.response_headers or {}),
        body=operation.response_body.encode(),
    )
