"""Driving one operation of any kind through its provider call, as the operation's owner.

The driver is generic: it asks the operation's kind (`app/operations/kinds.py`) what to
send, what the provider holds and what to write, and makes every write itself, fenced:
1. commit PROVIDER_REQUEST_SENT before the call (`send`), or, right after a claim that
   committed it, go straight to the call (`call`);
2. the call itself, with no transaction open (`_call`): what the provider's answer or error
   means is decided here, once;
3. record what came of it, fenced: a final outcome with its stored answer, the business
   object's write and its event in one statement (`_record`), FAILED_RETRYABLE (`defer`) or
   UNKNOWN_REQUIRES_RECOVERY on the recovery schedule (`record_unknown`); or, for a kind
   whose object has several attempts (a payment across providers), move it to its next
   attempt when the answer proves this one took no effect (`_fail_over`) and call again.
A write that finds a newer owner returns `FencedOut` and leaves the operation to it.
Every event the driver writes (an outcome's, the needs-attention one) goes through its
`deliver` hook first, which the composition root gives: what the statement writes along
with the event (the webhooks' fan-out) is appended to it there.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from app.db.database import Connection, Database
from app.failpoints import Failpoints
from app.operations import reads
from app.operations import repository as operations
from app.operations.kinds import Failover, OperationKind, Recording
from app.operations.outcomes import FencedOut, Final, Indefinite, NotSent, Unknown
from app.operations.states import Trigger
from app.operations.values import EventWrite, OwnedRef, Schedule
from app.provider.errors import CircuitOpen, OutcomeUnknown, RequestNotSent, RequestRejected
from app.tracing.spans import annotate

SubjectT = TypeVar("SubjectT")
FoundT = TypeVar("FoundT")
logger = logging.getLogger("payments.driving")

# Called once per failover with (from provider, to provider, cause): the metrics' hook.
FailoverObserver = Callable[[str, str, str], None]
# Given every event the driver writes, the event to write: with what follows it in its
# statement (`app/events/outbox.py`'s `followed_by`).
EventHook = Callable[[EventWrite], EventWrite]


class Driver(Generic[SubjectT, FoundT]):
    """The owner's writes around a provider call, for the operations of one kind."""

    def __init__(
        self,
        kind: OperationKind[Any, SubjectT, FoundT],
        *,
        db: Database,
        lease_s: float,
        failpoints: Failpoints,
        on_failover: FailoverObserver | None = None,
        deliver: EventHook | None = None,
    ):
        self.kind = kind
        self._db = db
        self._lease_s = lease_s
        self._failpoints = failpoints
        self._on_failover = on_failover
        self._deliver = deliver

    async def load_many(
        self, conn: Connection, operations: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, SubjectT]:
        """The business objects of a batch of operations (their ids and days), read at once
        (the worker's claim)."""
        return await self.kind.load_many(conn, operations)

    async def lookup(
        self, ref: OwnedRef, subject: SubjectT | None = None
    ) -> tuple[SubjectT, FoundT | None]:
        """The business object (read unless given) and what the provider holds for it.

        Raises `LookupFailed` when the provider cannot say.
        """
        if subject is None:
            async with self._db.connection() as conn:
                subject = await self.kind.load(conn, ref.id, ref.created_at)
        return subject, await self.kind.look_up(subject)

    async def send(
        self, ref: OwnedRef, trigger: Trigger, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Commit PROVIDER_REQUEST_SENT (send, retry or resend), then call the provider."""
        await self._failpoints.reach("after_claim")
        async with self._db.connection() as conn:
            sent = await operations.mark_sent(
                conn, ref, trigger, actor=actor, lease_s=self._lease_s
            )
            subject = await self.kind.load(conn, ref.id, ref.created_at)
        if sent is None:
            return FencedOut(ref.id, ref.fence)
        # A client's retry of FAILED_RETRYABLE is the attempt's only send: its earlier one
        # was certainly not processed. A recovery's send follows a request that may land.
        only_send = trigger is Trigger.RETRY
        return await self._call(sent, subject, actor=actor, only_send=only_send)

    async def call(
        self, sent: OwnedRef, subject: SubjectT, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Call the provider for an operation whose claim committed PROVIDER_REQUEST_SENT."""
        await self._failpoints.reach("after_claim")
        return await self._call(sent, subject, actor=actor, only_send=True)

    async def _call(
        self, sent: OwnedRef, subject: SubjectT, *, actor: str, only_send: bool
    ) -> Final | Indefinite | FencedOut:
        """Call the provider and record a definite answer; an indefinite one comes back.

        `only_send`: nothing else was ever sent under this attempt's key (the claim's call,
        a retry of FAILED_RETRYABLE, the first send after a failover), so a refusal proves
        the attempt took no effect. A kind that can fail over moves to its next attempt
        when the answer allows it (`OperationKind.failover`) and calls again, each attempt's
        first send an only send. No transaction is open across a call: it may take up to
        the provider timeout.
        """
        while True:
            annotate(operation_id=str(sent.id), fence=sent.fence, attempt=sent.attempts)
            failover: Failover | None
            try:
                found = await self.kind.request(subject)
            except RequestRejected as exc:
                recording = self.kind.rejected(subject, str(exc), operation_id=sent.id)
                return await self._record(sent, recording, actor=actor)
            except RequestNotSent as exc:
                unsent = Indefinite(
                    sent,
                    str(exc),
                    not_sent=True,
                    retry_after_s=exc.retry_after,
                    circuit_open=isinstance(exc, CircuitOpen),
                    links=self.kind.links(subject),
                )
                failover = self.kind.failover(subject, unsent) if only_send else None
                if failover is None:
                    return unsent
            except OutcomeUnknown as exc:
                # Never a failover: the attempt may have taken effect. A lookup decides.
                return Indefinite(sent, f"outcome unknown: {exc}", not_sent=False)
            else:
                failover = self.kind.failover(subject, found)
                if failover is None:
                    return await self.record_found(
                        sent, subject, found, actor=actor, how="provider answered"
                    )
            moved = await self._fail_over(sent, subject, failover, actor=actor)
            if moved is None:
                return FencedOut(sent.id, sent.fence)
            sent, subject = moved
            only_send = True

    async def _fail_over(
        self, sent: OwnedRef, subject: SubjectT, failover: Failover, *, actor: str
    ) -> tuple[OwnedRef, SubjectT] | None:
        """Write the move to the next attempt (fenced); the new reference and subject, or
        None when a newer owner holds the operation."""
        move = self.kind.next_attempt(subject, failover)
        async with self._db.connection() as conn:
            moved = await operations.fail_over(
                conn,
                sent,
                actor=actor,
                reason=failover.reason,
                lease_s=self._lease_s,
                subject=move.write,
            )
        if moved is None:
            return None
        await self._failpoints.reach("after_failover")
        if self._on_failover is not None:
            self._on_failover(move.from_provider, move.to_provider, failover.cause)
        fields = {"operation_id": str(sent.id), "from": move.from_provider, "to": move.to_provider}
        logger.info(
            f"{self.kind.noun} failed over", extra={"fields": fields | {"cause": failover.cause}}
        )
        return moved, move.subject

    async def fail_over_if_declined(
        self, ref: OwnedRef, subject: SubjectT, found: FoundT, *, actor: str
    ) -> Final | Indefinite | FencedOut | None:
        """Recovery found `found` under the latest attempt: if it is a decline another
        provider may take, fail over and send the next attempt (what that came to); None
        when it is to be recorded as it is."""
        failover = self.kind.failover(subject, found)
        if failover is None:
            return None
        moved = await self._fail_over(ref, subject, failover, actor=actor)
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        sent, subject = moved
        return await self._call(sent, subject, actor=actor, only_send=True)

    async def record_found(
        self, ref: OwnedRef, subject: SubjectT, found: FoundT, *, actor: str, how: str
    ) -> Final | FencedOut:
        """The provider holds a definite result under the key: record it, COMPLETED."""
        await self._failpoints.reach("before_record")
        recording = self.kind.found(subject, found, operation_id=ref.id, how=how)
        return await self._record(ref, recording, actor=actor)

    async def record_no_effect(
        self, ref: OwnedRef, subject: SubjectT, *, actor: str, reason: str
    ) -> Final | FencedOut:
        """Certainly took no effect, as an operator resolved it: FAILED, stored."""
        recording = self.kind.no_effect(subject, operation_id=ref.id, reason=reason)
        return await self._record(ref, recording, actor=actor)

    async def _record(
        self, ref: OwnedRef, recording: Recording, *, actor: str
    ) -> Final | FencedOut:
        """One statement: the outcome, its audit row, the stored answer, the business
        object's result and the outcome's event, all or (fenced out) nothing."""
        async with self._db.connection() as conn:
            done = await operations.record_final(
                conn,
                ref,
                recording.trigger,
                actor=actor,
                reason=recording.reason,
                stored=recording.stored,
                subject=recording.write,
                event=self._delivered(recording.event),
            )
        if done is None:
            return FencedOut(ref.id, ref.fence)
        return recording.outcome

    def _delivered(self, event: EventWrite) -> EventWrite:
        return event if self._deliver is None else self._deliver(event)

    async def refresh(self, ref: OwnedRef) -> OwnedRef | None:
        """The operation as this owner holds it now; None if a newer owner took it."""
        async with self._db.connection() as conn:
            return await reads.owned(conn, ref)

    async def defer(self, unsent: Indefinite, *, actor: str) -> NotSent | FencedOut:
        """The provider certainly did not process it: FAILED_RETRYABLE, nothing stored."""
        ref = unsent.ref
        async with self._db.connection() as conn:
            moved = await operations.defer(conn, ref, actor=actor, reason=unsent.reason)
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        retry_after_s = max(1, math.ceil(unsent.retry_after_s or 1))
        return NotSent(ref.id, retry_after_s, self.kind.noun, unsent.links or {})

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
            event = None
            if schedule.needs_attention:
                try:
                    event = self.kind.attention_event(
                        await self.kind.load(conn, ref.id, ref.created_at)
                    )
                    event = None if event is None else self._delivered(event)
                except LookupError:
                    # A broken row (what made its reconcile fail) is still flagged; it gets
                    # no event, and the log says why.
                    logger.error(
                        "no needs-attention event: operation %s has no %s", ref.id, self.kind.noun
                    )
            moved = await operations.mark_unknown(
                conn, ref, actor=actor, reason=reason, schedule=schedule, event=event
            )
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        return Unknown(ref.id, schedule.attempts, schedule.delay_s, schedule.needs_attention)
