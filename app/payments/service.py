"""The create-payment flow: the keyed flow (`app/idempotency/flow.py`) with a payment's claim.

What is a payment's own here is the claim: one statement inserts the operation (first writer
wins on the unique scoped key) with the owner's lease, claimed and marked sent, its audit
rows, and its payment with the derived provider key and its route across providers (chosen
here, once: `app/provider/routing.py`); or, when the key is taken, reads the row that holds
it, in the same round trip. Everything after the claim (replays, conflicts,
waiting, takeovers, recovery) is the keyed flow's, shared with refunds.
"""

from __future__ import annotations

import uuid
from typing import Any

from app.db.database import Database
from app.idempotency.fingerprint import fingerprint
from app.idempotency.flow import KeyedFlow, Won
from app.idempotency.replies import Answer
from app.observability.metrics import Metrics
from app.operations import repository as operations
from app.operations.values import Claimed, OperationName, Snapshot
from app.payments import repository as payments
from app.payments.driver import ChargeDriver
from app.payments.kind import PAYMENT, links
from app.payments.rows import PaymentRow
from app.payments.schemas import CreatePaymentCommand
from app.provider.keys import derive_provider_key
from app.provider.routing import RoutingTable
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler


class PaymentService:
    """Creates payments exactly once per scoped idempotency key."""

    def __init__(
        self,
        *,
        db: Database,
        driver: ChargeDriver,
        routing: RoutingTable,
        reconciler: Reconciler[PaymentRow, Any],
        policy: RecoveryPolicy,
        lease_s: float,
        key_ttl_s: int,
        metrics: Metrics,
    ):
        self._db = db
        self._routing = routing
        self._metrics = metrics
        self._lease_s = lease_s
        self._key_ttl_s = key_ttl_s
        self._flow = KeyedFlow(
            kind=PAYMENT,
            db=db,
            driver=driver,
            reconciler=reconciler,
            policy=policy,
            lease_s=lease_s,
            key_ttl_s=key_ttl_s,
            metrics=metrics,
        )

    async def create(
        self,
        *,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreatePaymentCommand,
        wait_s: float = 0.0,
    ) -> Answer:
        """Answer one `POST /payments`; `wait_s` is the (already capped) `Prefer: wait`."""
        digest = fingerprint(OperationName.CREATE_PAYMENT, command.canonical())

        async def claim(owner: str) -> Won[PaymentRow] | Snapshot | None:
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
        command: CreatePaymentCommand,
        digest: str,
        owner: str,
    ) -> Won[PaymentRow] | Snapshot | None:
        operation_id, payment_id = uuid.uuid4(), uuid.uuid4()
        provider_key = derive_provider_key(payment_id)
        route = self._routing.route(tenant_id, command.currency, command.amount_minor)
        async with self._db.connection() as conn:
            claimed = await operations.claim(
                conn,
                operation_id=operation_id,
                tenant_id=tenant_id,
                operation_name=OperationName.CREATE_PAYMENT,
                idempotency_key=idempotency_key,
                fingerprint=digest,
                payment_id=payment_id,
                owner=owner,
                lease_s=self._lease_s,
                key_ttl_s=self._key_ttl_s,
                subject=payments.created_with_claim(
                    payment_id=payment_id,
                    tenant_id=tenant_id,
                    provider_key=provider_key,
                    route=route,
                    command=command,
                ),
                send_reason=_send_reason(route),
            )
        if not isinstance(claimed, Claimed):
            return claimed
        self._metrics.attempt_begun(route[0])
        payment = payments.as_claimed(
            payment_id=payment_id,
            tenant_id=tenant_id,
            operation_id=operation_id,
            provider_key=provider_key,
            route=route,
            command=command,
            at=claimed.at,
        )
        return Won(claimed.ref, payment, links(payment_id))


def _send_reason(route: tuple[str, ...]) -> str | None:
    """The claim's send, as the history tells it: the provider too, when there is a choice."""
    return None if len(route) == 1 else f"calling the provider: {route[0]} (attempt 0)"
