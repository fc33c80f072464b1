"""A payment with everything about it, for the console's payment page: its captures and
voids (a two-step payment's), its refunds, the operations that made them, their events and
webhook deliveries, and one timeline.

The timeline is the audit trail of the payment's operation and of each capture's, void's and
refund's, merged by time, with the events written along the way: what an operator reads to
answer "what happened to this payment". Read with the operators' own reads (no provider
lookup: that is on each operation's page, one click away).

The payment's attempts come from its row (`route`, `attempt`): each with its provider and
key, and where it stands; an attempt left by a failover carries its failover's record
(`app/payments/attempts.py`), as does the timeline's failover transition.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from app.admin.operators import OperatorActions
from app.authorizations import repository as modifications_repository
from app.authorizations.rows import ModificationRow, ModificationType
from app.db.database import Connection, Database
from app.errors import NotFound
from app.operations.values import Snapshot
from app.payments import attempts as payment_attempts
from app.payments import operator_reads as records
from app.payments.attempts import FailoverRecord
from app.payments.rows import PaymentRow
from app.refunds import repository as refunds_repository
from app.refunds.rows import RefundRow
from app.webhooks.operator_reads import EventDeliveries

MAX_REFUNDS = 100
# Of each type: a payment is captured a few times at most, and voided once.
MAX_MODIFICATIONS = 100
STANDINGS = {
    "failed_over": "failed over",
    "holds_outcome": "holds the outcome",
    "current": "in progress",
    "not_tried": "not tried",
}


@dataclass(frozen=True)
class Moment:
    """One line of the timeline: a state change of one of the operations, or an event."""

    at: datetime
    subject: str  # "payment", "capture <id>", "void <id>" or "refund <id>"
    operation_id: uuid.UUID
    what: str  # "RECEIVED -> PROVIDER_REQUEST_SENT" or the event's type
    trigger: str  # the transition's trigger, or "event"
    actor: str
    reason: str | None
    failover: FailoverRecord | None = None  # the record of a failover transition


@dataclass(frozen=True)
class Attempt:
    """One attempt on the payment's route."""

    number: int
    provider: str
    key: str  # the provider idempotency key it is sent under
    # As the admin API says it: failed_over, holds_outcome, current (pending), not_tried.
    standing: str
    left_because: FailoverRecord | None  # why the payment moved on from it, if it did

    @property
    def label(self) -> str:
        return STANDINGS[self.standing]


@dataclass(frozen=True)
class Dossier:
    payment: PaymentRow
    operation: Snapshot
    refunds: list[tuple[RefundRow, Snapshot]]
    # Its captures and voids, oldest first, each with its operation.
    modifications: list[tuple[ModificationRow, Snapshot]]
    # (subject, event) for the payment's operation, then each capture's and void's, then
    # each refund's.
    events: list[tuple[str, EventDeliveries]]
    timeline: list[Moment]
    attempts: list[Attempt]


def attempts(payment: PaymentRow, moved: list[FailoverRecord]) -> list[Attempt]:
    """Every attempt on the payment's route, with why each one left behind was left."""
    left = {failover.from_attempt: failover for failover in moved}
    return [
        Attempt(n, provider, payment.attempt_key(n), payment.standing(n), left.get(n))
        for n, provider in enumerate(payment.route)
    ]


def _moments(
    subject: str,
    snapshot: Snapshot,
    events: list[EventDeliveries],
    moved: Sequence[FailoverRecord] = (),
) -> list[Moment]:
    operation_id = snapshot.operation.id
    by_transition = {failover.transition_id: failover for failover in moved}
    found = [
        Moment(
            t.created_at,
            subject,
            operation_id,
            f"{t.from_state or '-'} -> {t.to_state}",
            t.trigger,
            t.actor,
            t.reason,
            by_transition.get(t.id),
        )
        for t in snapshot.history
    ]
    found += [
        Moment(e.created_at, subject, operation_id, e.type, "event", "service", None)
        for e in events
    ]
    return found


async def payment_dossier(
    operators: OperatorActions, db: Database, payment_id: uuid.UUID
) -> Dossier:
    """The payment's dossier; `NotFound` if there is no such payment."""
    async with db.connection() as conn:
        payment = await records.payment_by_id(conn, payment_id)
        if payment is None:
            raise NotFound("no such payment")
        refunds = await refunds_repository.list_for_payment(
            conn, tenant_id=payment.tenant_id, payment_id=payment.id, limit=MAX_REFUNDS
        )
        moved = await payment_attempts.of_payment(conn, payment.tenant_id, payment.id)
        changes = await _modifications(conn, payment)
    operation = await operators.read(payment.operation_id)
    tenant = payment.tenant_id
    own = await operators.deliveries.for_operation(
        tenant_id=tenant, operation_id=operation.operation.id
    )
    timeline = _moments("payment", operation, own, moved)
    events = [("payment", event) for event in own]

    async def follow(subject: str, operation_id: uuid.UUID) -> Snapshot:
        """The operation that made a capture, void or refund, its timeline and events."""
        snapshot = await operators.read(operation_id)
        theirs = await operators.deliveries.for_operation(
            tenant_id=tenant, operation_id=operation_id
        )
        timeline.extend(_moments(subject, snapshot, theirs))
        events.extend((subject, event) for event in theirs)
        return snapshot

    with_operations = [
        (change, await follow(f"{change.type} {change.id}", change.operation_id))
        for change in changes
    ]
    with_snapshots = [
        (refund, await follow(f"refund {refund.id}", refund.operation_id)) for refund in refunds
    ]
    timeline.sort(key=lambda moment: moment.at)
    shown = attempts(payment, moved)
    return Dossier(payment, operation, with_snapshots, with_operations, events, timeline, shown)


async def _modifications(conn: Connection, payment: PaymentRow) -> list[ModificationRow]:
    """The payment's captures and voids, oldest first (none for a one-step payment)."""
    if not payment.manual:
        return []
    found = [
        row
        for type in ModificationType
        for row in await modifications_repository.list_for_payment(
            conn,
            tenant_id=payment.tenant_id,
            payment_id=payment.id,
            type=type,
            limit=MAX_MODIFICATIONS,
        )
    ]
    return sorted(found, key=lambda row: (row.created_at, row.id))
