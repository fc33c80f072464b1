"""The refund as an operation kind: `create_refund`, registered in `app/composition.py`.

Everything a refund's operation is, in one class (the interface is `OperationKind`,
`app/operations/kinds.py`). Its claim may refuse: in the claim's one short transaction it
locks the payment row (see `repository.py` for why), checks that the payment may be
refunded by this much, and writes the refund row with the claim. A refused request
(`409 PAYMENT_NOT_REFUNDABLE`, `422 REFUND_EXCEEDS_PAYMENT`) rolls the transaction back:
nothing is stored under the key and nothing is sent, so the same key may be sent again once
the situation changes; a key that already holds an operation is answered from it, refusal
or not. Its request is the refund at the provider holding the payment's charge; its outcome
is written with the refund's status and, once it succeeded, its payment's refunded amount.
Operators see the refund the provider holds under the refund's derived key.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from app.clock import utcnow
from app.db.database import Connection
from app.db.fragments import Searchable
from app.errors import NotFound
from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.ids import new_id
from app.operations.kinds import (
    ClaimKey,
    KindParts,
    OperationKind,
    Prepared,
    Recording,
    Refused,
)
from app.operations.outcomes import Rejected, Succeeded
from app.operations.states import Trigger
from app.operations.values import OperationName
from app.payments.money import format_minor_units
from app.payments.status import REFUNDABLE, PaymentStatus
from app.provider.client import ProviderRefund, RefundRequest
from app.provider.keys import derive_refund_key
from app.provider.registry import Providers
from app.refunds import replies, search
from app.refunds import repository as refunds
from app.refunds.errors import PaymentNotRefundable, RefundExceedsPayment
from app.refunds.repository import LockedPayment
from app.refunds.rows import RefundRow, RefundStatus
from app.refunds.schemas import CreateRefundCommand
from app.refunds.views import refund_json


def links(payment_id: uuid.UUID, refund_id: uuid.UUID) -> dict[str, str]:
    """The ids a problem about a refund's operation shows: the refunded payment's, its own."""
    return {"payment_id": str(payment_id), "refund_id": str(refund_id)}


class RefundKind(OperationKind[CreateRefundCommand, RefundRow, ProviderRefund]):
    """A refund of a payment's charge, at the provider holding it, never beyond it."""

    name: ClassVar[str] = OperationName.CREATE_REFUND
    noun: ClassVar[str] = "refund"
    record_name: ClassVar[str] = "refund"
    search: ClassVar[Searchable] = search
    # The payment's row lock is held from the check to the claim's commit, so no other
    # refund of this payment is claimed in between.
    claims_in_transaction: ClassVar[bool] = True

    def __init__(self, *, providers: Providers):
        # A refund goes to the provider holding its payment's charge, and only there.
        self._providers = providers

    @classmethod
    def build(cls, parts: KindParts) -> RefundKind:
        return cls(providers=parts.providers)

    # The claim.

    async def prepare(
        self, conn: Connection, key: ClaimKey, command: CreateRefundCommand
    ) -> Prepared[RefundRow] | Refused:
        locked = await refunds.lock_payment(
            conn, tenant_id=key.tenant_id, payment_id=command.payment_id
        )
        if locked is None:
            raise NotFound("no such payment")
        refusal = _refusal(locked, command)
        charge_id = locked.charge_id
        if refusal is not None or charge_id is None:
            return Refused(refusal or PaymentNotRefundable("the payment has no charge to refund"))
        refund_id = new_id(utcnow())
        provider_key = derive_refund_key(refund_id)

        def claimed(at: datetime) -> RefundRow:
            return refunds.as_claimed(
                refund_id=refund_id,
                tenant_id=key.tenant_id,
                operation_id=key.operation_id,
                provider_key=provider_key,
                charge_id=charge_id,
                provider=locked.provider,
                command=command,
                at=at,
            )

        return Prepared(
            write=refunds.created_with_claim(
                refund_id=refund_id,
                tenant_id=key.tenant_id,
                provider_key=provider_key,
                charge_id=charge_id,
                provider=locked.provider,
                command=command,
            ),
            claimed=claimed,
        )

    def links(self, subject: RefundRow) -> dict[str, str]:
        return links(subject.payment_id, subject.id)

    # The provider.

    async def request(self, subject: RefundRow) -> ProviderRefund:
        request = RefundRequest(
            provider_key=subject.provider_key,
            charge_id=subject.charge_id,
            amount_minor=subject.amount_minor,
        )
        return await self._providers[subject.provider].create_refund(request)

    async def look_up(self, subject: RefundRow) -> ProviderRefund | None:
        return await self._providers[subject.provider].find_refund(subject.provider_key)

    # What to record.

    def found(
        self, subject: RefundRow, found: ProviderRefund, *, operation_id: uuid.UUID, how: str
    ) -> Recording:
        """The provider made the refund: COMPLETED, the refund SUCCEEDED, the payment's
        refunded amount and status moved, and the answer stored, in one statement."""
        at = utcnow()
        stored = replies.refunded(subject, found, at=at)
        return Recording(
            trigger=Trigger.COMPLETE,
            reason=f"{how}: refunded",
            stored=stored,
            write=refunds.result_with_outcome(
                subject, status=RefundStatus.SUCCEEDED, provider_refund_id=found.refund_id, at=at
            ),
            event=outcome_event(
                tenant_id=subject.tenant_id,
                type=EventType.REFUND_SUCCEEDED,
                data=refund_json(
                    subject,
                    status=RefundStatus.SUCCEEDED.value,
                    provider_refund_id=found.refund_id,
                    updated_at=at,
                ),
            ),
            outcome=Succeeded(operation_id, stored),
        )

    def rejected(self, subject: RefundRow, detail: str, *, operation_id: uuid.UUID) -> Recording:
        """The provider refused the refund, nothing refunded: FAILED, its amount released."""
        reason = f"provider rejected the request: {detail}"
        return _failed(subject, detail, operation_id=operation_id, reason=reason)

    def no_effect(self, subject: RefundRow, *, operation_id: uuid.UUID, reason: str) -> Recording:
        """Not refunded, as an operator resolved it after a lookup that found no refund:
        FAILED, its amount released, the answer every FAILED refund gives."""
        detail = "an operator resolved it as not refunded; the provider holds no refund"
        return _failed(subject, detail, operation_id=operation_id, reason=reason)

    # Reading.

    # `refunds` is not partitioned: read by its unique `operation_id` alone.

    async def load(
        self, conn: Connection, operation_id: uuid.UUID, created_at: datetime
    ) -> RefundRow:
        return await refunds.get_for_operation(conn, operation_id)

    async def load_many(
        self, conn: Connection, operations: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, RefundRow]:
        return await refunds.get_for_operations(conn, list(operations))

    async def operation_for_key(self, conn: Connection, provider_key: str) -> uuid.UUID | None:
        return await refunds.operation_for_key(conn, provider_key)

    # What operators see.

    def body(self, subject: RefundRow) -> dict[str, Any]:
        return refund_json(subject)

    def took_effect(self, found: ProviderRefund) -> bool:
        # The provider keeps only refunds it made.
        return True

    def show(self, found: ProviderRefund) -> dict[str, Any]:
        return {
            "refund_id": found.refund_id,
            "status": "succeeded",
            "charge_id": found.charge_id,
            "amount_minor": found.amount_minor,
        }


def _failed(refund: RefundRow, detail: str, *, operation_id: uuid.UUID, reason: str) -> Recording:
    stored = replies.rejected(refund, detail, operation_id=operation_id)
    at = utcnow()
    return Recording(
        trigger=Trigger.FAIL,
        reason=reason,
        stored=stored,
        write=refunds.result_with_outcome(
            refund, status=RefundStatus.FAILED, provider_refund_id=None, at=at
        ),
        event=outcome_event(
            tenant_id=refund.tenant_id,
            type=EventType.REFUND_FAILED,
            data=refund_json(refund, status=RefundStatus.FAILED.value, updated_at=at),
        ),
        outcome=Rejected(operation_id, detail, stored),
    )


def _refusal(
    locked: LockedPayment, command: CreateRefundCommand
) -> PaymentNotRefundable | RefundExceedsPayment | None:
    """Why this refund may not be made now, if it may not."""
    if PaymentStatus(locked.status) not in REFUNDABLE:
        return PaymentNotRefundable(
            f"only a SUCCEEDED, PARTIALLY_REFUNDED or CAPTURED payment can be refunded; "
            f"this one is {locked.status}"
        )
    if command.amount_minor > locked.left_minor:
        left = format_minor_units(max(locked.left_minor, 0), locked.currency)
        return RefundExceedsPayment(
            f"the payment has {left} {locked.currency} left to refund "
            "(succeeded and in-flight refunds count)",
            amount_refundable=left,
        )
    return None
