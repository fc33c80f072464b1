"""The create-payment flow: claim the key, or answer from what the key already holds.

first request with a key     claim (one transaction) -> drive the charge
same key, other request      422 IDEMPOTENCY_KEY_REUSED, nothing changes
expired key                  422 IDEMPOTENCY_KEY_EXPIRED
COMPLETED / FAILED           the stored reply, byte for byte, Idempotent-Replayed: true
in flight, lease live        409 IDEMPOTENCY_REQUEST_IN_PROGRESS (after Prefer: wait)
in flight, lease expired,    take recovery ownership and reconcile inline
  or UNKNOWN
FAILED_RETRYABLE             take ownership and drive the same payment again
"""

from __future__ import annotations

import asyncio
import time
import uuid

from app.db.engine import SessionMaker, transaction
from app.errors import IdempotencyKeyExpired, IdempotencyKeyReused, RequestInProgress
from app.idempotency import repository as operations
from app.idempotency.fingerprint import fingerprint
from app.idempotency.repository import OwnedRef, Snapshot
from app.idempotency.states import IN_FLIGHT, TERMINAL, State, Trigger
from app.observability.logging import bind, key_hash
from app.observability.metrics import Metrics
from app.payments import repository as payments
from app.payments.charging import ChargeDriver
from app.payments.replies import Reply, operation_location, stored_reply
from app.payments.schemas import CreatePaymentCommand
from app.provider.keys import derive_provider_key
from app.recovery.reconcile import Reconciler
from app.settings import Settings

CREATE_PAYMENT = "create_payment"
MAX_WAIT_S = 10.0
_WAIT_POLL_S = 0.05


def new_owner(role: str) -> str:
    """A unique name for one owner (one request, one worker pass) in leases and history."""
    return f"{role}:{uuid.uuid4().hex[:12]}"


class PaymentService:
    """Creates payments exactly once per scoped idempotency key."""

    def __init__(
        self,
        *,
        sessions: SessionMaker,
        driver: ChargeDriver,
        reconciler: Reconciler,
        settings: Settings,
        metrics: Metrics,
    ):
        self._sessions = sessions
        self._driver = driver
        self._reconciler = reconciler
        self._settings = settings
        self._metrics = metrics

    async def create(
        self,
        *,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreatePaymentCommand,
        wait_s: float = 0.0,
    ) -> Reply:
        """Answer one `POST /payments`."""
        owner = new_owner("api")
        bind(tenant_id=str(tenant_id), key_hash=key_hash(tenant_id, idempotency_key))
        digest = fingerprint(CREATE_PAYMENT, command.canonical())
        while True:
            reply = await self._claim_or_answer(
                tenant_id=tenant_id,
                idempotency_key=idempotency_key,
                command=command,
                digest=digest,
                owner=owner,
                wait_s=min(max(wait_s, 0.0), MAX_WAIT_S),
            )
            if reply is not None:
                return reply
            # The key was released between our claim and our read: claim it again.

    async def _claim_or_answer(
        self,
        *,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreatePaymentCommand,
        digest: str,
        owner: str,
        wait_s: float,
    ) -> Reply | None:
        operation_id, payment_id = uuid.uuid4(), uuid.uuid4()
        # The claim: one short transaction inserts the operation (first writer wins on the
        # unique scoped key), its payment with the derived provider key, and our lease.
        async with transaction(self._sessions) as session:
            claimed = await operations.insert_claim(
                session,
                operation_id=operation_id,
                tenant_id=tenant_id,
                operation_name=CREATE_PAYMENT,
                idempotency_key=idempotency_key,
                fingerprint=digest,
                payment_id=payment_id,
                owner=owner,
                lease_s=self._settings.lease_s,
            )
            if claimed:
                await payments.insert_payment(
                    session,
                    payment_id=payment_id,
                    tenant_id=tenant_id,
                    operation_id=operation_id,
                    provider_key=derive_provider_key(payment_id),
                    command=command,
                )
        if claimed:
            bind(operation_id=str(operation_id))
            ref = OwnedRef(id=operation_id, fence=1, state=State.RECEIVED, attempts=0)
            return await self._driver.send(ref, Trigger.SEND, actor=owner)
        return await self._answer_existing(
            tenant_id=tenant_id,
            idempotency_key=idempotency_key,
            digest=digest,
            owner=owner,
            wait_s=wait_s,
        )

    async def _answer_existing(
        self, *, tenant_id: uuid.UUID, idempotency_key: str, digest: str, owner: str, wait_s: float
    ) -> Reply | None:
        """Answer from the operation holding the key; None if there is none any more."""
        deadline = time.monotonic() + wait_s
        contended_fence: int | None = None
        while True:
            snapshot = await self._find(tenant_id, idempotency_key)
            if snapshot is None:
                # The key's tombstone was released after our claim lost: the key is free.
                return None
            op = snapshot.operation
            bind(operation_id=str(op.id))
            if snapshot.key_expired:
                self._metrics.expired_key_retries.inc()
                raise IdempotencyKeyExpired(
                    "this Idempotency-Key has expired; use a new key for a new payment",
                    operation_id=op.id,
                )
            if op.fingerprint != digest:
                self._metrics.conflicts.labels("different_request").inc()
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was used for a different request",
                    operation_id=op.id,
                )
            if snapshot.state in TERMINAL:
                self._metrics.replays.inc()
                return stored_reply(op, replayed=True)
            # A takeover that failed while nothing changed means another transaction holds
            # the row right now (a recovery taking it over): that is work in progress too.
            busy = snapshot.lease_live or contended_fence == op.fence
            if busy:
                if time.monotonic() < deadline:
                    # Prefer: wait — poll for the owner's outcome until the deadline.
                    await asyncio.sleep(_WAIT_POLL_S)
                    continue
                self._metrics.conflicts.labels("in_progress").inc()
                raise RequestInProgress(
                    "a request with this Idempotency-Key is still being processed",
                    operation_id=op.id,
                    headers={
                        "retry-after": "1",
                        "link": f'<{operation_location(op.id)}>; rel="monitor"',
                    },
                )
            reply = await self._take_over(snapshot, owner)
            if reply is not None:
                return reply
            # Another request or worker took ownership first, or holds the row: look again.
            contended_fence = op.fence

    async def _find(self, tenant_id: uuid.UUID, idempotency_key: str) -> Snapshot | None:
        async with transaction(self._sessions) as session:
            return await operations.find_by_key(
                session,
                tenant_id=tenant_id,
                operation_name=CREATE_PAYMENT,
                idempotency_key=idempotency_key,
                key_ttl_s=self._settings.key_ttl_s,
            )

    async def _take_over(self, snapshot: Snapshot, owner: str) -> Reply | None:
        """Own a stalled, unknown or retryable operation and drive it; None if we lost."""
        async with transaction(self._sessions) as session:
            ref = await operations.take_ownership(
                session, snapshot, owner=owner, lease_s=self._settings.lease_s
            )
        if ref is None:
            return None
        if ref.state is State.FAILED_RETRYABLE:
            # Definitely not processed before: drive the same payment, same provider key.
            return await self._driver.send(ref, Trigger.RETRY, actor=owner)
        assert ref.state in IN_FLIGHT or ref.state is State.UNKNOWN_REQUIRES_RECOVERY
        reply = await self._reconciler.reconcile(ref, actor=owner, inline=True)
        self._metrics.reconciled(reply.status, source="inline")
        return reply
