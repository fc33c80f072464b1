"""Driving one payment through the provider call and recording what came of it.

The mechanism both the create flow and recovery use; what an indefinite answer means is
theirs to decide (`Indefinite`), so no policy lives here. The steps every operation shares
(PROVIDER_REQUEST_SENT before the call, fenced outcomes after it) are `OperationDriver`'s
(`app/operations/driver.py`); this module adds what is a payment's own: the charge request,
the charge lookup, and the payment's status and event written with the outcome.
"""

from __future__ import annotations

import logging
import uuid

from app.clock import utcnow
from app.db.database import Connection, Database
from app.events.models import EventType
from app.events.outbox import outcome_event
from app.failpoints import Failpoints
from app.operations.driver import OperationDriver
from app.operations.outcomes import (
    Declined,
    FencedOut,
    Rejected,
    Succeeded,
)
from app.operations.states import Trigger
from app.operations.values import EventWrite, OwnedRef, StoredResponse
from app.payments import replies
from app.payments import repository as payments
from app.payments.models import PaymentRow
from app.payments.status import PaymentStatus
from app.payments.views import payment_json
from app.provider.client import Charge, ChargeRequest, ProviderClient

logger = logging.getLogger("payments.charging")


class ChargeDriver(OperationDriver[PaymentRow]):
    """Sends a payment's charge, looks it up, and records outcomes as the operation's owner."""

    def __init__(
        self,
        *,
        db: Database,
        provider: ProviderClient,
        lease_s: float,
        failpoints: Failpoints,
    ):
        super().__init__(db=db, lease_s=lease_s, failpoints=failpoints)
        self._provider = provider

    async def _load(self, conn: Connection, operation_id: uuid.UUID) -> PaymentRow:
        return await payments.get_for_operation(conn, operation_id)

    async def load_many(
        self, conn: Connection, operation_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, PaymentRow]:
        return await payments.get_for_operations(conn, operation_ids)

    async def _request(self, subject: PaymentRow) -> Charge:
        return await self._provider.create_charge(_charge_request(subject))

    async def lookup(
        self, ref: OwnedRef, payment: PaymentRow | None = None
    ) -> tuple[PaymentRow, Charge | None]:
        """The payment (read unless given) and the charge the provider holds under its key.

        Raises `LookupFailed` when the provider cannot say.
        """
        if payment is None:
            async with self._db.connection() as conn:
                payment = await payments.get_for_operation(conn, ref.id)
        return payment, await self._provider.find_charge(payment.provider_key)

    async def record_found(
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

    async def _record_rejected(
        self, ref: OwnedRef, payment: PaymentRow, detail: str, *, actor: str
    ) -> Rejected | FencedOut:
        """The provider refused the request as invalid, nothing charged: FAILED, stored."""
        stored = replies.rejected(payment, detail, operation_id=ref.id)
        reason = f"provider rejected the request: {detail}"
        return await self._record_failed(ref, payment, detail, stored, actor=actor, reason=reason)

    async def record_not_charged(
        self, ref: OwnedRef, payment: PaymentRow, *, actor: str, reason: str
    ) -> Rejected | FencedOut:
        """Certainly not charged, as an operator resolved it after a provider lookup that
        found no charge: FAILED, with the answer a FAILED operation replays."""
        detail = "an operator resolved it as not charged; the provider holds no charge"
        stored = replies.not_charged(payment, detail, operation_id=ref.id)
        return await self._record_failed(ref, payment, detail, stored, actor=actor, reason=reason)

    async def _record_failed(
        self,
        ref: OwnedRef,
        payment: PaymentRow,
        detail: str,
        stored: StoredResponse,
        *,
        actor: str,
        reason: str,
    ) -> Rejected | FencedOut:
        at = utcnow()
        written = await self._record_final(
            ref,
            Trigger.FAIL,
            actor=actor,
            reason=reason,
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

    async def _attention_event(self, conn: Connection, ref: OwnedRef) -> EventWrite | None:
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
