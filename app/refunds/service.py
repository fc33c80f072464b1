"""The create-refund flow: the keyed flow (`app/idempotency/flow.py`) with a refund's claim.

What is a refund's own here is the claim, which may refuse: in one short transaction it
locks the payment row (see `repository.py` for why), checks that the payment may be
refunded by this much, and claims the key with the refund row, as a payment's claim does.
A refused request (`409 PAYMENT_NOT_REFUNDABLE`, `422 REFUND_EXCEEDS_PAYMENT`) rolls the
transaction back: nothing is stored under the key and nothing is sent, so the same key may
be sent again once the situation changes. A key that already holds an operation is answered
from it (replay, reuse, in progress ...), refusal or not.
"""

from __future__ import annotations

import uuid
from typing import Any

from app.db.database import Database
from app.errors import NotFound
from app.idempotency.fingerprint import fingerprint
from app.idempotency.flow import KeyedFlow, Won
from app.idempotency.replies import Answer
from app.observability.metrics import Metrics
from app.operations import reads
from app.operations import repository as operations
from app.operations.values import Claimed, OperationName, Snapshot
from app.payments import repository as payments
from app.payments.money import format_minor_units
from app.payments.status import REFUNDABLE, PaymentStatus
from app.provider.keys import derive_refund_key
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler
from app.refunds import repository as refunds
from app.refunds.driver import RefundDriver
from app.refunds.errors import PaymentNotRefundable, RefundExceedsPayment
from app.refunds.kind import REFUND, links
from app.refunds.repository import LockedPayment
from app.refunds.rows import RefundRow
from app.refunds.schemas import CreateRefundCommand, CreateRefundRequest, to_command


class RefundService:
    """Creates refunds exactly once per scoped idempotency key, never beyond the payment."""

    def __init__(
        self,
        *,
        db: Database,
        driver: RefundDriver,
        reconciler: Reconciler[RefundRow, Any],
        policy: RecoveryPolicy,
        lease_s: float,
        key_ttl_s: int,
        metrics: Metrics,
    ):
        self._db = db
        self._lease_s = lease_s
        self._key_ttl_s = key_ttl_s
        self._flow = KeyedFlow(
            kind=REFUND,
            db=db,
            driver=driver,
            reconciler=reconciler,
            policy=policy,
            lease_s=lease_s,
            key_ttl_s=key_ttl_s,
            metrics=metrics,
        )

    async def command_for(
        self, *, tenant_id: uuid.UUID, payment_id: uuid.UUID, request: CreateRefundRequest
    ) -> CreateRefundCommand:
        """The canonical command, in the payment's currency; 404 for no such payment.

        Raises `AmountError` when the amount does not fit the currency.
        """
        async with self._db.connection() as conn:
            payment = await payments.get(conn, tenant_id=tenant_id, payment_id=payment_id)
        if payment is None:
            raise NotFound("no such payment")
        return to_command(request, payment_id=payment_id, currency=payment.currency)

    async def create(
        self,
        *,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreateRefundCommand,
        wait_s: float = 0.0,
    ) -> Answer:
        """Answer one `POST /payments/{id}/refunds`; `wait_s` is the capped `Prefer: wait`."""
        digest = fingerprint(OperationName.CREATE_REFUND, command.canonical())

        async def claim(owner: str) -> Won[RefundRow] | Snapshot | None:
            return await self._claim(tenant_id, idempotency_key, command, digest, owner)

        return await self._flow.run(
            tenant_id=tenant_id,
            idempotency_key=idempotency_key,
            digest=digest,
            claim=claim,
            wait_s=wait_s,
        )

    async def _claim(
        self,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreateRefundCommand,
        digest: str,
        owner: str,
    ) -> Won[RefundRow] | Snapshot | None:
        operation_id, refund_id = uuid.uuid4(), uuid.uuid4()
        provider_key = derive_refund_key(refund_id)
        # One transaction: the payment's row lock is held from the check to the claim's
        # commit, so no other refund of this payment is claimed in between.
        async with self._db.transaction() as conn:
            locked = await refunds.lock_payment(
                conn, tenant_id=tenant_id, payment_id=command.payment_id
            )
            if locked is None:
                raise NotFound("no such payment")
            refusal = _refusal(locked, command)
            if refusal is not None or locked.charge_id is None:
                # Refused, unless the key already holds an operation: that one answers.
                existing = await reads.find_by_key(
                    conn,
                    tenant_id=tenant_id,
                    operation_name=OperationName.CREATE_REFUND,
                    idempotency_key=idempotency_key,
                    key_ttl_s=self._key_ttl_s,
                )
                if existing is not None:
                    return existing
                raise refusal or PaymentNotRefundable("the payment has no charge to refund")
            claimed = await operations.claim(
                conn,
                operation_id=operation_id,
                tenant_id=tenant_id,
                operation_name=OperationName.CREATE_REFUND,
                idempotency_key=idempotency_key,
                fingerprint=digest,
                payment_id=command.payment_id,
                refund_id=refund_id,
                owner=owner,
                lease_s=self._lease_s,
                key_ttl_s=self._key_ttl_s,
                subject=refunds.created_with_claim(
                    refund_id=refund_id,
                    tenant_id=tenant_id,
                    provider_key=provider_key,
                    charge_id=locked.charge_id,
                    provider=locked.provider,
                    command=command,
                ),
            )
        if not isinstance(claimed, Claimed):
            return claimed
        won = refunds.as_claimed(
            refund_id=refund_id,
            tenant_id=tenant_id,
            operation_id=operation_id,
            provider_key=provider_key,
            charge_id=locked.charge_id,
            provider=locked.provider,
            command=command,
            at=claimed.at,
        )
        return Won(claimed.ref, won, links(command.payment_id, refund_id))


def _refusal(
    locked: LockedPayment, command: CreateRefundCommand
) -> PaymentNotRefundable | RefundExceedsPayment | None:
    """Why this refund may not be made now, if it may not."""
    if PaymentStatus(locked.status) not in REFUNDABLE:
        return PaymentNotRefundable(
            f"only a SUCCEEDED or PARTIALLY_REFUNDED payment can be refunded; "
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
