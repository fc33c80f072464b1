"""The create-payment flow: claim the key, or answer from what the key already holds.

first request with a key     claim (one transaction) -> drive the charge
same key, other request      422 IDEMPOTENCY_KEY_REUSED, nothing changes
expired key                  422 IDEMPOTENCY_KEY_EXPIRED
COMPLETED / FAILED           the stored answer, byte for byte (`Replay`)
in flight, lease live        409 IDEMPOTENCY_REQUEST_IN_PROGRESS (after Prefer: wait)
in flight, lease expired,    take recovery ownership and reconcile inline
  or UNKNOWN
FAILED_RETRYABLE             take ownership and drive the same payment again

The flow returns a typed answer (`app/payments/replies.py` renders it); refusals are raised
as problem errors.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from app.clock import utcnow
from app.db.database import Database
from app.errors import IdempotencyKeyExpired, IdempotencyKeyReused, RequestInProgress
from app.idempotency.fingerprint import fingerprint
from app.observability.logging import bind, key_hash
from app.observability.metrics import Metrics
from app.operations import leases, reads
from app.operations import repository as operations
from app.operations.models import OperationName
from app.operations.outcomes import FencedOut, Final, Indefinite, Outcome, Unknown
from app.operations.refs import Claimed, OwnedRef, Snapshot, stored_response
from app.operations.states import TERMINAL, State, Trigger
from app.operations.views import operation_json
from app.payments import repository as payments
from app.payments.charging import ChargeDriver
from app.payments.models import PaymentRow
from app.payments.replies import Answer, Pending, Replay, operation_location, retry_after_s
from app.payments.schemas import CreatePaymentCommand
from app.provider.keys import derive_provider_key
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler

MAX_WAIT_S = 10.0
# Prefer: wait reads the operation again after 50 ms, then twice as long each time up to
# half a second: a waiting request learns of a quick outcome quickly without reading the row
# twenty times a second for as long as it waits.
_WAIT_FIRST_S = 0.05
_WAIT_MAX_S = 0.5


def new_owner(role: str) -> str:
    """A unique name for one owner (one request, one worker pass) in leases and history."""
    return f"{role}:{uuid.uuid4().hex[:12]}"


class PaymentService:
    """Creates payments exactly once per scoped idempotency key."""

    def __init__(
        self,
        *,
        db: Database,
        driver: ChargeDriver,
        reconciler: Reconciler[PaymentRow],
        policy: RecoveryPolicy,
        lease_s: float,
        key_ttl_s: int,
        metrics: Metrics,
    ):
        self._db = db
        self._driver = driver
        self._reconciler = reconciler
        self._policy = policy
        self._lease_s = lease_s
        self._key_ttl_s = key_ttl_s
        self._metrics = metrics

    async def create(
        self,
        *,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreatePaymentCommand,
        wait_s: float = 0.0,
    ) -> Answer:
        """Answer one `POST /payments`; `wait_s` is the (already capped) `Prefer: wait`."""
        owner = new_owner("api")
        bind(tenant_id=str(tenant_id), key_hash=key_hash(tenant_id, idempotency_key))
        digest = fingerprint(OperationName.CREATE_PAYMENT, command.canonical())
        while True:
            answer = await self._claim_or_answer(
                tenant_id, idempotency_key, command, digest, owner, wait_s
            )
            if answer is not None:
                return answer
            # The key was released between our claim and our read: claim it again.

    async def _claim_or_answer(
        self,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CreatePaymentCommand,
        digest: str,
        owner: str,
        wait_s: float,
    ) -> Answer | None:
        operation_id, payment_id = uuid.uuid4(), uuid.uuid4()
        provider_key = derive_provider_key(payment_id)
        # The claim: one statement inserts the operation (first writer wins on the unique
        # scoped key) with our lease, claimed and marked sent, its audit rows, and its
        # payment with the derived provider key; or, when the key is taken, reads the row
        # that holds it, in the same round trip.
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
                    command=command,
                ),
            )
        if isinstance(claimed, Claimed):
            ref, claimed_at = claimed.ref, claimed.at
            bind(operation_id=str(operation_id))
            payment = payments.as_claimed(
                payment_id=payment_id,
                tenant_id=tenant_id,
                operation_id=operation_id,
                provider_key=provider_key,
                command=command,
                at=claimed_at,
            )
            sent = await self._driver.call(ref, payment, actor=owner)
            return await self._settle_own_attempt(sent, payment_id, owner)
        return await self._answer_existing(
            tenant_id, idempotency_key, digest, owner, wait_s, seen=claimed
        )

    async def _answer_existing(
        self,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        digest: str,
        owner: str,
        wait_s: float,
        *,
        seen: Snapshot | None,
    ) -> Answer | None:
        """Answer from the operation holding the key; None if there is none any more.

        `seen` is the row as the lost claim read it, if it could; every later look reads
        it again.
        """
        deadline = time.monotonic() + wait_s
        pause = _WAIT_FIRST_S
        contended_fence: int | None = None
        while True:
            snapshot = seen or await self._find(tenant_id, idempotency_key)
            seen = None
            if snapshot is None:
                # The key's tombstone was released after our claim lost: the key is free.
                return None
            op = snapshot.operation
            bind(operation_id=str(op.id))
            if snapshot.key_expired:
                self._metrics.expired_key_retries.inc()
                raise _expired(op.id)
            if op.fingerprint != digest:
                self._metrics.conflicts.labels("different_request").inc()
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was used for a different request",
                    operation_id=op.id,
                )
            if snapshot.state in TERMINAL:
                self._metrics.replays.inc()
                return Replay(stored_response(op))
            # A takeover that failed while nothing changed means another transaction holds
            # the row right now (a recovery taking it over): that is work in progress too.
            if snapshot.lease_live or contended_fence == op.fence:
                left = deadline - time.monotonic()
                if left > 0:
                    # Prefer: wait — look again for the owner's outcome, backing off.
                    await asyncio.sleep(min(pause, left))
                    pause = min(pause * 2, _WAIT_MAX_S)
                    self._metrics.wait_polls.inc()
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
            answer = await self._take_over(snapshot, owner)
            if answer is not None:
                return answer
            # Another request or worker took ownership first, or holds the row: look again.
            contended_fence = op.fence

    async def _find(self, tenant_id: uuid.UUID, idempotency_key: str) -> Snapshot | None:
        async with self._db.connection() as conn:
            return await reads.find_by_key(
                conn,
                tenant_id=tenant_id,
                operation_name=OperationName.CREATE_PAYMENT,
                idempotency_key=idempotency_key,
                key_ttl_s=self._key_ttl_s,
            )

    async def _take_over(self, snapshot: Snapshot, owner: str) -> Answer | None:
        """Own a stalled, unknown or retryable operation and drive it; None if we lost."""
        async with self._db.connection() as conn:
            ref = await leases.take_over(conn, snapshot, owner=owner, lease_s=self._lease_s)
        if ref is None:
            return None
        if ref.state is State.FAILED_RETRYABLE:
            # Definitely not processed before: drive the same payment, same provider key.
            return await self._drive(ref, Trigger.RETRY, snapshot.operation.payment_id, owner)
        outcome = await self._reconciler.reconcile(ref, actor=owner)
        self._metrics.reconciled(outcome, source="inline")
        return await self._present(outcome)

    async def _drive(
        self, ref: OwnedRef, trigger: Trigger, payment_id: uuid.UUID, owner: str
    ) -> Answer:
        """A client's own retry of a payment the provider did not process: send it again."""
        sent = await self._driver.send(ref, trigger, actor=owner)
        return await self._settle_own_attempt(sent, payment_id, owner)

    async def _settle_own_attempt(
        self, sent: Final | Indefinite | FencedOut, payment_id: uuid.UUID, owner: str
    ) -> Answer:
        """Decide what a client's own send came to, and record an indefinite answer."""
        outcome: Outcome
        if not isinstance(sent, Indefinite):
            outcome = sent
        elif sent.not_sent:
            # Certainly not processed, and nothing of ours is still on its way: the client
            # may retry with the same key (503), which drives this again.
            outcome = await self._driver.defer(sent, payment_id=payment_id, actor=owner)
        else:
            schedule = self._policy.after_send(sent.ref.attempts)
            outcome = await self._driver.record_unknown(
                sent.ref, actor=owner, reason=sent.reason, schedule=schedule
            )
        return await self._present(outcome)

    async def _present(self, outcome: Outcome) -> Answer:
        """Final and not-sent outcomes as they are; for the rest, the operation as it stands."""
        if not isinstance(outcome, Unknown | FencedOut):
            return outcome
        async with self._db.connection() as conn:
            snapshot = await reads.get_snapshot(
                conn, outcome.operation_id, key_ttl_s=self._key_ttl_s, with_history=True
            )
        assert snapshot is not None, "operations are never deleted"
        op = snapshot.operation
        if snapshot.state in TERMINAL:
            # Fenced out by an owner that finished: its answer is the answer.
            if snapshot.key_expired:
                raise _expired(op.id)
            return Replay(stored_response(op))
        return Pending(operation_json(snapshot), retry_after_s(op.next_check_at, utcnow()))


def _expired(operation_id: uuid.UUID) -> IdempotencyKeyExpired:
    return IdempotencyKeyExpired(
        "this Idempotency-Key has expired; use a new key for a new payment",
        operation_id=operation_id,
    )
