"""Driving one refund through the provider call and recording what came of it.

The steps every operation shares are `OperationDriver`'s (`app/operations/driver.py`); this
module adds what is a refund's own: the refund request, the refund lookup, and the refund's
status (and, once it succeeded, its payment's refunded amount) written with the outcome.
"""

from __future__ import annotations

import uuid

from app.clock import utcnow
from app.db.database import Connection, Database
from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.failpoints import Failpoints
from app.operations.driver import OperationDriver
from app.operations.outcomes import FencedOut, Rejected, Succeeded
from app.operations.states import Trigger
from app.operations.values import OwnedRef
from app.provider.client import ProviderRefund, RefundRequest
from app.provider.registry import Providers
from app.refunds import replies
from app.refunds import repository as refunds
from app.refunds.rows import RefundRow, RefundStatus
from app.refunds.views import refund_json


class RefundDriver(OperationDriver[RefundRow]):
    """Sends a refund, looks it up, and records outcomes as the operation's owner."""

    def __init__(
        self, *, db: Database, providers: Providers, lease_s: float, failpoints: Failpoints
    ):
        super().__init__(db=db, lease_s=lease_s, failpoints=failpoints)
        # A refund goes to the provider holding its payment's charge, and only there.
        self._providers = providers

    async def _load(self, conn: Connection, operation_id: uuid.UUID) -> RefundRow:
        return await refunds.get_for_operation(conn, operation_id)

    async def load_many(
        self, conn: Connection, operation_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, RefundRow]:
        return await refunds.get_for_operations(conn, operation_ids)

    async def _request(self, subject: RefundRow) -> ProviderRefund:
        request = RefundRequest(
            provider_key=subject.provider_key,
            charge_id=subject.charge_id,
            amount_minor=subject.amount_minor,
        )
        return await self._providers[subject.provider].create_refund(request)

    async def lookup(
        self, ref: OwnedRef, refund: RefundRow | None = None
    ) -> tuple[RefundRow, ProviderRefund | None]:
        """The refund (read unless given) and what the provider holds under its key.

        Raises `LookupFailed` when the provider cannot say.
        """
        if refund is None:
            async with self._db.connection() as conn:
                refund = await refunds.get_for_operation(conn, ref.id)
        return refund, await self._providers[refund.provider].find_refund(refund.provider_key)

    async def record_found(
        self, ref: OwnedRef, refund: RefundRow, found: ProviderRefund, *, actor: str, how: str
    ) -> Succeeded | FencedOut:
        """The provider made the refund: COMPLETED, the refund SUCCEEDED, the payment's
        refunded amount and status moved, and the answer stored, in one statement."""
        await self._failpoints.reach("before_record")
        at = utcnow()
        stored = replies.refunded(refund, found, at=at)
        written = await self._record_final(
            ref,
            Trigger.COMPLETE,
            actor=actor,
            reason=f"{how}: refunded",
            stored=stored,
            result=refunds.result_with_outcome(
                refund, status=RefundStatus.SUCCEEDED, provider_refund_id=found.refund_id, at=at
            ),
            event=outcome_event(
                tenant_id=refund.tenant_id,
                type=EventType.REFUND_SUCCEEDED,
                data=refund_json(
                    refund,
                    status=RefundStatus.SUCCEEDED.value,
                    provider_refund_id=found.refund_id,
                    updated_at=at,
                ),
            ),
        )
        if not written:
            return FencedOut(ref.id, ref.fence)
        return Succeeded(ref.id, stored)

    async def _record_rejected(
        self, ref: OwnedRef, refund: RefundRow, detail: str, *, actor: str
    ) -> Rejected | FencedOut:
        """The provider refused the refund, nothing refunded: FAILED, its amount released."""
        reason = f"provider rejected the request: {detail}"
        return await self._record_failed(ref, refund, detail, actor=actor, reason=reason)

    async def record_not_charged(
        self, ref: OwnedRef, refund: RefundRow, *, actor: str, reason: str
    ) -> Rejected | FencedOut:
        """Certainly not refunded, as an operator resolved it after a provider lookup that
        found no refund: FAILED, its amount released, the answer every FAILED refund gives."""
        detail = "an operator resolved it as not refunded; the provider holds no refund"
        return await self._record_failed(ref, refund, detail, actor=actor, reason=reason)

    async def _record_failed(
        self, ref: OwnedRef, refund: RefundRow, detail: str, *, actor: str, reason: str
    ) -> Rejected | FencedOut:
        stored = replies.rejected(refund, detail, operation_id=ref.id)
        at = utcnow()
        written = await self._record_final(
            ref,
            Trigger.FAIL,
            actor=actor,
            reason=reason,
            stored=stored,
            result=refunds.result_with_outcome(
                refund, status=RefundStatus.FAILED, provider_refund_id=None, at=at
            ),
            event=outcome_event(
                tenant_id=refund.tenant_id,
                type=EventType.REFUND_FAILED,
                data=refund_json(refund, status=RefundStatus.FAILED.value, updated_at=at),
            ),
        )
        if not written:
            return FencedOut(ref.id, ref.fence)
        return Rejected(ref.id, detail, stored)
