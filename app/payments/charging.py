"""Driving one payment through the provider call and recording what came of it.

The mechanism both the create flow and recovery use; what an indefinite answer means is
theirs to decide (`Indefinite`), so no policy lives here. The transaction boundaries are the
spec's:
1. commit PROVIDER_REQUEST_SENT (fenced) before the call;
2. call the provider with no transaction open;
3. record the outcome, the payment's new status and the answer a replay will return, in one
   fenced transaction.
Every write is made as the operation's owner; a write that finds a newer owner returns
`FencedOut` and leaves the operation to it.
"""

from __future__ import annotations

import logging
import math
import uuid

from app.clock import utcnow
from app.db.database import Connection, Database
from app.events.models import EventType
from app.events.outbox import outcome_event
from app.failpoints import Failpoints
from app.operations import reads
from app.operations import repository as operations
from app.operations.outcomes import (
    Declined,
    FencedOut,
    Final,
    Indefinite,
    NotSent,
    Rejected,
    Succeeded,
    Unknown,
)
from app.operations.refs import EventWrite, OwnedRef, Schedule, StoredResponse, SubjectWrite
from app.operations.states import Trigger
from app.payments import replies
from app.payments import repository as payments
from app.payments.models import PaymentRow
from app.payments.schemas import payment_json
from app.payments.status import PaymentStatus
from app.provider.client import Charge, ChargeRequest, ProviderClient
from app.provider.errors import ChargeNotSent, ChargeRejected, CircuitOpen, OutcomeUnknown

logger = logging.getLogger("payments.charging")


class ChargeDriver:
    """Sends a payment's charge, looks it up, and records outcomes as the operation's owner."""

    def __init__(
        self,
        *,
        db: Database,
        provider: ProviderClient,
        lease_s: float,
        failpoints: Failpoints,
    ):
        self._db = db
        self._provider = provider
        self._lease_s = lease_s
        self._failpoints = failpoints

    async def send(
        self, ref: OwnedRef, trigger: Trigger, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Commit PROVIDER_REQUEST_SENT (retry or resend), then call the provider."""
        await self._failpoints.reach("after_claim")
        async with self._db.connection() as conn:
            sent = await operations.mark_sent(
                conn, ref, trigger, actor=actor, lease_s=self._lease_s
            )
            payment = await payments.get_for_operation(conn, ref.id)
        if sent is None:
            return FencedOut(ref.id, ref.fence)
        return await self._call(sent, payment, actor=actor)

    async def call(
        self, sent: OwnedRef, payment: PaymentRow, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Call the provider for an operation whose claim committed PROVIDER_REQUEST_SENT."""
        await self._failpoints.reach("after_claim")
        return await self._call(sent, payment, actor=actor)

    async def _call(
        self, sent: OwnedRef, payment: PaymentRow, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Call the provider and record a definite answer; an indefinite one comes back.

        No transaction is open across this call: it may take up to the provider timeout.
        """
        try:
            charge = await self._provider.create_charge(_charge_request(payment))
        except ChargeRejected as exc:
            return await self._record_rejected(sent, payment, str(exc), actor=actor)
        except ChargeNotSent as exc:
            return Indefinite(
                sent,
                str(exc),
                not_sent=True,
                retry_after_s=exc.retry_after,
                circuit_open=isinstance(exc, CircuitOpen),
            )
        except OutcomeUnknown as exc:
            return Indefinite(sent, f"outcome unknown: {exc}", not_sent=False)
        return await self.record_charge(sent, payment, charge, actor=actor, how="provider answered")

    async def refresh(self, ref: OwnedRef) -> OwnedRef | None:
        """The operation as this owner holds it now; None if a newer owner took it."""
        async with self._db.connection() as conn:
            return await reads.owned(conn, ref)

    async def lookup(self, ref: OwnedRef) -> tuple[PaymentRow, Charge | None]:
        """The payment and the charge the provider holds under its key, if any.

        Raises `LookupFailed` when the provider cannot say.
        """
        async with self._db.connection() as conn:
            payment = await payments.get_for_operation(conn, ref.id)
        return payment, await self._provider.find_charge(payment.provider_key)

    async def record_charge(
        self, ref: OwnedRef, payment: PaymentRow, charge: Charge, *, actor: str, how: str
    ) -> Succeeded | Declined | FencedOut:
        """The provider has a charge (approved or declined): COMPLETED, answer stored."""
        await self._failpoints.reach("before_record")
        at = utcnow()
        stored = replies.charged(payment, charge, operation_id=ref.id, at=at)
        status = PaymentStatus.SUCCEEDED if charge.status == "succeeded" else PaymentStatus.DECLINED
        data = payment_json(
            payment,
            status=status.value,
            provider_charge_id=charge.charge_id,
            decline_code=charge.decline_code,
            updated_at=at,
        )
        kind = (
            EventType.PAYMENT_SUCCEEDED
            if status is PaymentStatus.SUCCEEDED
            else EventType.PAYMENT_DECLINED
        )
        written = await self._record_final(
            ref,
            Trigger.COMPLETE,
            actor=actor,
            reason=f"{how}: {charge.status}",
            stored=stored,
            result=payments.result_with_outcome(
                payment.id,
                status=status,
                provider_charge_id=charge.charge_id,
                decline_code=charge.decline_code,
                at=at,
            ),
            event=outcome_event(tenant_id=payment.tenant_id, type=kind, data=data),
        )
        if not written:
            return FencedOut(ref.id, ref.fence)
        if status is PaymentStatus.SUCCEEDED:
            return Succeeded(ref.id, stored)
        return Declined(ref.id, charge.decline_code or "declined", stored)

    async def defer(
        self, unsent: Indefinite, *, payment_id: uuid.UUID, actor: str
    ) -> NotSent | FencedOut:
        """The provider certainly did not process it: FAILED_RETRYABLE, nothing stored."""
        ref = unsent.ref
        async with self._db.connection() as conn:
            moved = await operations.defer(conn, ref, actor=actor, reason=unsent.reason)
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        return NotSent(ref.id, payment_id, max(1, math.ceil(unsent.retry_after_s or 1)))

    async def record_unknown(
        self, ref: OwnedRef, *, actor: str, reason: str, schedule: Schedule
    ) -> Unknown | FencedOut:
        """No definite answer: UNKNOWN_REQUIRES_RECOVERY, next check as scheduled."""
        if schedule.needs_attention:
            logger.warning(
                "operation needs attention",
                extra={"fields": {"operation_id": str(ref.id), "attempts": schedule.attempts}},
            )
        async with self._db.connection() as conn:
            # Rare (past the attempts limit), so the extra read costs the hot path nothing;
            # the outbox writes the event once, on the first flag.
            event = await _attention_event(conn, ref) if schedule.needs_attention else None
            moved = await operations.mark_unknown(
                conn, ref, actor=actor, reason=reason, schedule=schedule, event=event
            )
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        return Unknown(ref.id, schedule.attempts, schedule.delay_s, schedule.needs_attention)

    async def _record_rejected(
        self, ref: OwnedRef, payment: PaymentRow, detail: str, *, actor: str
    ) -> Rejected | FencedOut:
        """The provider refused the request as invalid, nothing charged: FAILED, stored."""
        stored = replies.rejected(payment, detail, operation_id=ref.id)
        at = utcnow()
        written = await self._record_final(
            ref,
            Trigger.FAIL,
            actor=actor,
            reason=f"provider rejected the request: {detail}",
            stored=stored,
            result=payments.result_with_outcome(
                payment.id,
                status=PaymentStatus.FAILED,
                provider_charge_id=None,
                decline_code=None,
                at=at,
            ),
            event=outcome_event(
                tenant_id=payment.tenant_id,
                type=EventType.PAYMENT_FAILED,
                data=payment_json(payment, status=PaymentStatus.FAILED.value, updated_at=at),
            ),
        )
        if not written:
            return FencedOut(ref.id, ref.fence)
        return Rejected(ref.id, detail, stored)

    async def _record_final(
        self,
        ref: OwnedRef,
        trigger: Trigger,
        *,
        actor: str,
        reason: str,
        stored: StoredResponse,
        result: SubjectWrite,
        event: EventWrite,
    ) -> bool:
        """One statement: the outcome, its audit row, the stored answer, the payment's
        status and the event, all or (fenced out) nothing. True when this owner's write
        landed."""
        async with self._db.connection() as conn:
            done = await operations.record_final(
                conn,
                ref,
                trigger,
                actor=actor,
                reason=reason,
                stored=stored,
                subject=result,
                event=event,
            )
        return done is not None


async def _attention_event(conn: Connection, ref: OwnedRef) -> EventWrite | None:
    """payment.needs_attention, with the payment as it stands.

    An operation whose payment cannot be read (a broken row, which is what made its
    reconcile fail) is still flagged; it gets no event, and the log says why.
    """
    try:
        payment = await payments.get_for_operation(conn, ref.id)
    except LookupError:
        logger.error("no needs-attention event: operation %s has no payment", ref.id)
        return None
    return outcome_event(
        tenant_id=payment.tenant_id,
        type=EventType.PAYMENT_NEEDS_ATTENTION,
        data=payment_json(payment),
    )


def _charge_request(payment: PaymentRow) -> ChargeRequest:
    """Every call for a payment sends the same values under the same derived key."""
    return ChargeRequest(
        provider_key=payment.provider_key,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        account_id=payment.account_id,
        reference=str(payment.id),
    )
