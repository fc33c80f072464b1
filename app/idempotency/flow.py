"""The keyed flow: claim the idempotency key, or answer from what the key already holds.

Every operation a client creates with an `Idempotency-Key` goes through this one flow, for
every kind alike: the kind (`app/operations/kinds.py`) says what the claim writes of its
business object (or why it refuses), the driver (`app/operations/driver.py`) makes the
provider call and records what came of it, the reconciler takes over what is stalled.

first request with a key     claim (one statement; with the kind's checks in it when its
                               claim is `Guarded`) -> drive the provider call
same key, other request      422 IDEMPOTENCY_KEY_REUSED, nothing changes
expired key                  422 IDEMPOTENCY_KEY_EXPIRED
COMPLETED / FAILED           the stored answer, byte for byte (`Replay`)
in flight, lease live        409 IDEMPOTENCY_REQUEST_IN_PROGRESS (after Prefer: wait)
in flight, lease expired,    take recovery ownership and reconcile inline
  or UNKNOWN
FAILED_RETRYABLE             take ownership and drive the same operation again

The flow returns a typed answer (`app/idempotency/replies.py` renders it); refusals are raised
as problem errors.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

from app.clock import utcnow
from app.db.database import Connection, Database
from app.errors import ProblemError
from app.idempotency.errors import IdempotencyKeyExpired, IdempotencyKeyReused, RequestInProgress
from app.idempotency.fingerprint import fingerprint
from app.idempotency.replies import Answer, Pending, Replay, operation_location, retry_after_s
from app.idempotency.rules import KeyAnswer, drives_again, key_answer, own_send_trigger
from app.ids import new_id
from app.observability.logging import bind, key_hash
from app.observability.metrics import Metrics
from app.operations import leases, reads
from app.operations import repository as operations
from app.operations.kinds import ClaimKey, Guarded, OperationKind, Prepared, Refused
from app.operations.outcomes import FencedOut, Final, Indefinite, Outcome, Unknown, reconciled_as
from app.operations.states import TERMINAL, Trigger
from app.operations.values import Claimed, OwnedRef, Snapshot, stored_response
from app.operations.views import operation_json
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler
from app.tracing.spans import span

MAX_WAIT_S = 10.0
# Prefer: wait reads the operation again after 50 ms, then twice as long each time up to
# half a second: a waiting request learns of a quick outcome quickly without reading the row
# twenty times a second for as long as it waits.
_WAIT_FIRST_S = 0.05
_WAIT_MAX_S = 0.5
# A lost claim whose key then names no operation it can read claims again: the key was
# released in between, and the next claim takes it. Twice in a row takes two releases of one
# key between a claim and a read; a third means the key's row names an operation that is
# not there (a partition dropped by hand under a key still held): an error, not a loop.
CLAIM_ROUNDS = 3

CommandT = TypeVar("CommandT", bound="Canonical")


def request_owner() -> str:
    """A unique owner name for one request, in leases and history (`api:` and 12 hex)."""
    return f"api:{uuid.uuid4().hex[:12]}"


class KeyRowOrphaned(RuntimeError):
    """The key's row (`idempotency_keys`) names an operation that is not there: the key is
    held and nothing answers for it. Nothing is charged; the request answers 500, logged."""


class Canonical(Protocol):
    """A command the flow fingerprints: its canonical form (`canonical()`)."""

    def canonical(self) -> Mapping[str, Any]: ...


class KeyedFlow(Generic[CommandT]):
    """Runs one kind of operation exactly once per scoped idempotency key."""

    def __init__(
        self,
        *,
        reconciler: Reconciler[Any, Any],
        db: Database,
        policy: RecoveryPolicy,
        lease_s: float,
        key_ttl_s: int,
        metrics: Metrics,
    ):
        self._reconciler = reconciler
        self._driver = reconciler.driver
        self._kind: OperationKind[CommandT, Any, Any] = reconciler.driver.kind
        self._db = db
        self._policy = policy
        self._lease_s = lease_s
        self._key_ttl_s = key_ttl_s
        self._metrics = metrics

    async def run(
        self,
        *,
        tenant_id: uuid.UUID,
        idempotency_key: str,
        command: CommandT,
        wait_s: float = 0.0,
    ) -> Answer:
        """Answer one request; `wait_s` is the (already capped) `Prefer: wait`."""
        digest = fingerprint(self._kind.name, command.canonical())
        owner = request_owner()
        bind(tenant_id=str(tenant_id), key_hash=key_hash(tenant_id, idempotency_key))
        for _round in range(CLAIM_ROUNDS):
            key = ClaimKey(new_id(utcnow()), tenant_id, idempotency_key)
            claimed = await self._claim(key, command, digest, owner)
            if isinstance(claimed, tuple):
                ref, subject = claimed
                bind(operation_id=str(ref.id))
                sent = await self._driver.call(ref, subject, actor=owner)
                return await self._conclude_own_send(ref, sent, owner)
            answer = await self._answer_existing(
                tenant_id, idempotency_key, digest, owner, wait_s, seen=claimed
            )
            if answer is not None:
                return answer
            # The key was released between our claim and our read: claim it again.
        raise KeyRowOrphaned(
            f"the key's row names an operation that cannot be read ({CLAIM_ROUNDS} claims "
            "lost, each to a row naming no operation)"
        )

    async def _claim(
        self, key: ClaimKey, command: CommandT, digest: str, owner: str
    ) -> tuple[OwnedRef, Any] | Snapshot | None:
        """Claim the key with the kind's business object, in one statement.

        The owner's reference and the object the claim made; or the row holding the key (a
        `Snapshot`); or None when that row is not visible yet (read it again). A request
        the kind refuses raises its problem, unless the key already holds an operation,
        which then answers; a refusal stores nothing.
        """
        kind = self._kind
        begin = self._db.transaction if kind.claims_in_transaction else self._db.connection
        async with begin() as conn:
            prepared = await kind.prepare(conn, key, command)
            if isinstance(prepared, Refused):
                return await self._refused(conn, key, prepared.problem)
            guard = prepared.guard if isinstance(prepared, Guarded) else None
            claimed, guarded = await operations.claim_guarded(
                conn,
                operation_id=key.operation_id,
                tenant_id=key.tenant_id,
                operation_name=kind.name,
                idempotency_key=key.idempotency_key,
                fingerprint=digest,
                owner=owner,
                lease_s=self._lease_s,
                key_ttl_s=self._key_ttl_s,
                subject=prepared.write,
                send_reason=prepared.send_reason,
                guard=guard,
            )
            if isinstance(prepared, Guarded):
                if isinstance(claimed, Claimed):
                    assert guarded is not None, "a guarded claim won from its guard's row"
                    return claimed.ref, prepared.claimed(guarded, claimed.at)
                if guarded is None or not guarded[0]:
                    # The guard refused: as a refusal by `prepare`, unless the statement
                    # already read the row holding the key.
                    problem = prepared.refusal(guarded)
                    if claimed is not None:
                        return claimed
                    return await self._refused(conn, key, problem)
        if not isinstance(claimed, Claimed):
            return claimed
        assert isinstance(prepared, Prepared)
        return claimed.ref, prepared.claimed(claimed.at)

    async def _refused(self, conn: Connection, key: ClaimKey, problem: ProblemError) -> Snapshot:
        """The operation holding the key, if one does (it answers instead); else `problem`."""
        existing = await reads.find_by_key(
            conn,
            tenant_id=key.tenant_id,
            operation_name=self._kind.name,
            idempotency_key=key.idempotency_key,
            key_ttl_s=self._key_ttl_s,
        )
        if existing is not None:
            return existing
        raise problem

    async def find(self, tenant_id: uuid.UUID, idempotency_key: str) -> Snapshot | None:
        """The tenant's operation of this kind holding `idempotency_key`, if any."""
        async with self._db.connection() as conn:
            return await reads.find_by_key(
                conn,
                tenant_id=tenant_id,
                operation_name=self._kind.name,
                idempotency_key=idempotency_key,
                key_ttl_s=self._key_ttl_s,
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
            snapshot = seen or await self.find(tenant_id, idempotency_key)
            seen = None
            if snapshot is None:
                # The key's tombstone was released after our claim lost: the key is free.
                return None
            op = snapshot.operation
            bind(operation_id=str(op.id))
            if snapshot.key_expired:
                self._metrics.expired_key_retries.inc()
                raise self._expired(op.id)
            if op.fingerprint != digest:
                self._metrics.conflicts.labels("different_request").inc()
                raise IdempotencyKeyReused(
                    "this Idempotency-Key was used for a different request",
                    operation_id=op.id,
                )
            decided = key_answer(
                snapshot.state,
                lease_live=snapshot.lease_live,
                # A takeover that failed while nothing changed means another transaction
                # holds the row right now (a recovery taking it over).
                contended=contended_fence == op.fence,
            )
            if decided is KeyAnswer.REPLAY:
                self._metrics.replays.inc()
                return Replay(stored_response(op))
            if decided is KeyAnswer.IN_PROGRESS:
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

    async def _take_over(self, snapshot: Snapshot, owner: str) -> Answer | None:
        """Own a stalled, unknown or retryable operation and drive it; None if we lost."""
        async with self._db.connection() as conn:
            ref = await leases.take_over(conn, snapshot, owner=owner, lease_s=self._lease_s)
        if ref is None:
            return None
        if drives_again(ref.state):
            # Definitely not processed before: drive the same operation, same provider key.
            sent = await self._driver.send(ref, Trigger.RETRY, actor=owner)
            return await self._conclude_own_send(ref, sent, owner)
        # Inline, in the request: the reconcile is part of the request's trace.
        attributes = {"payments.operation_id": str(ref.id), "payments.fence": ref.fence}
        with span("reconcile", attributes=attributes | {"payments.attempt": ref.attempts}):
            outcome = await self._reconciler.reconcile(ref, actor=owner)
        self._metrics.reconciled(reconciled_as(outcome), source="inline")
        return await self._present(ref, outcome)

    async def _conclude_own_send(
        self, ref: OwnedRef, sent: Final | Indefinite | FencedOut, owner: str
    ) -> Answer:
        """Decide what a client's own send came to, and record an indefinite answer."""
        outcome: Outcome
        if not isinstance(sent, Indefinite):
            outcome = sent
        elif own_send_trigger(sent) is Trigger.DEFER:
            # Certainly not processed, and nothing of ours is still on its way: the client
            # may retry with the same key (503), which drives this again.
            outcome = await self._driver.defer(sent, actor=owner)
        else:
            schedule = self._policy.after_send(sent.ref.attempts)
            outcome = await self._driver.record_unknown(
                sent.ref, actor=owner, reason=sent.reason, schedule=schedule
            )
        return await self._present(ref, outcome)

    async def _present(self, ref: OwnedRef, outcome: Outcome) -> Answer:
        """Final and not-sent outcomes as they are; for the rest, the operation `ref` names
        as it stands (read by its id and day: one partition)."""
        if not isinstance(outcome, Unknown | FencedOut):
            return outcome
        async with self._db.connection() as conn:
            snapshot = await reads.owned_snapshot(
                conn, ref, key_ttl_s=self._key_ttl_s, with_history=True
            )
        assert snapshot is not None, "operations are never deleted"
        op = snapshot.operation
        if snapshot.state in TERMINAL:
            # Fenced out by an owner that finished: its answer is the answer.
            if snapshot.key_expired:
                raise self._expired(op.id)
            return Replay(stored_response(op))
        return Pending(operation_json(snapshot), retry_after_s(op.next_check_at, utcnow()))

    def _expired(self, operation_id: uuid.UUID) -> IdempotencyKeyExpired:
        return IdempotencyKeyExpired(
            f"this Idempotency-Key has expired; use a new key for a new {self._kind.noun}",
            operation_id=operation_id,
        )
