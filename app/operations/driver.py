"""What every driver does as an operation's owner, whatever the operation acts on.

A driver (`payments/driver.py`, `refunds/driver.py`) owns the provider calls of one kind
of operation. The steps that are the same for every kind live here, once:
1. commit PROVIDER_REQUEST_SENT (fenced) before the call (`send`), or, right after a claim
   that committed it, go straight to the call (`call`);
2. the call itself, with no transaction open (`_call`): the subclass makes the request
   (`_request`); what the provider's answer or error means is decided here, once;
3. record what came of it, fenced: a final outcome with its stored answer and the business
   object's write in one statement (`_record_final`), FAILED_RETRYABLE (`defer`) or
   UNKNOWN_REQUIRES_RECOVERY on the recovery schedule (`record_unknown`); or, for a kind
   whose object has several attempts (a payment across providers), move it to its next
   attempt when the answer proves this one charged nothing (`_failover`, `_fail_over`) and
   call again.
A write that finds a newer owner returns `FencedOut` and leaves the operation to it.
"""

from __future__ import annotations

import logging
import math
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.db.database import Connection, Database
from app.failpoints import Failpoints
from app.operations import reads
from app.operations import repository as operations
from app.operations.outcomes import FencedOut, Final, Indefinite, NotSent, Unknown
from app.operations.states import Trigger
from app.operations.values import EventWrite, OwnedRef, Schedule, StoredResponse, SubjectWrite
from app.provider.errors import CircuitOpen, OutcomeUnknown, RequestNotSent, RequestRejected
from app.tracing.spans import annotate

SubjectT = TypeVar("SubjectT")
logger = logging.getLogger("payments.driving")


@dataclass(frozen=True)
class Failover:
    """Why an operation moves to its next attempt: `cause` is a low-cardinality label
    (`declined`, `not_processed`, `circuit_open`) for metrics and the failover's record,
    `reason` the audit's text, `detail` what the cause's own words are (a decline code, an
    error), if it has any."""

    cause: str
    reason: str
    detail: str | None = None


class OperationDriver(ABC, Generic[SubjectT]):
    """The owner's writes around a provider call for one kind of operation."""

    def __init__(self, *, db: Database, lease_s: float, failpoints: Failpoints):
        self._db = db
        self._lease_s = lease_s
        self._failpoints = failpoints

    @abstractmethod
    async def _load(self, conn: Connection, operation_id: uuid.UUID) -> SubjectT:
        """The business object the operation acts on."""

    async def load_many(
        self, conn: Connection, operation_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, SubjectT]:
        """The business objects of several operations, by operation id, in one read.

        An operation whose object cannot be read is missing from the answer, and its lookup
        reads it itself; a driver that does not override this reads every one that way.
        """
        return {}

    @abstractmethod
    async def _request(self, subject: SubjectT) -> Any:
        """Make the provider call for `subject`; what the provider made (a charge, a refund).

        Raises the provider client's errors: rejected, not sent, outcome unknown.
        """

    @abstractmethod
    async def record_found(
        self, ref: OwnedRef, subject: SubjectT, found: Any, *, actor: str, how: str
    ) -> Final | FencedOut:
        """The provider holds a definite result under the key: record it, COMPLETED."""

    @abstractmethod
    async def _record_rejected(
        self, ref: OwnedRef, subject: SubjectT, detail: str, *, actor: str
    ) -> Final | FencedOut:
        """The provider refused the request as invalid, nothing done: record it, FAILED."""

    async def _call(
        self, sent: OwnedRef, subject: SubjectT, *, actor: str, only_send: bool
    ) -> Final | Indefinite | FencedOut:
        """Call the provider and record a definite answer; an indefinite one comes back.

        `only_send`: nothing else was ever sent under this attempt's key (the claim's call,
        a retry of FAILED_RETRYABLE, the first send after a failover), so a refusal proves
        the attempt charged nothing. A kind that can fail over moves to its next attempt
        when the answer allows it (`_failover`) and calls again, each attempt's first send
        an only send. No transaction is open across a call: it may take up to the provider
        timeout.
        """
        while True:
            annotate(operation_id=str(sent.id), fence=sent.fence, attempt=sent.attempts)
            try:
                found = await self._request(subject)
            except RequestRejected as exc:
                return await self._record_rejected(sent, subject, str(exc), actor=actor)
            except RequestNotSent as exc:
                unsent = Indefinite(
                    sent,
                    str(exc),
                    not_sent=True,
                    retry_after_s=exc.retry_after,
                    circuit_open=isinstance(exc, CircuitOpen),
                )
                failover = self._failover(subject, unsent) if only_send else None
                if failover is None:
                    return unsent
            except OutcomeUnknown as exc:
                # Never a failover: the attempt may have charged. A lookup decides.
                return Indefinite(sent, f"outcome unknown: {exc}", not_sent=False)
            else:
                failover = self._failover(subject, found)
                if failover is None:
                    return await self.record_found(
                        sent, subject, found, actor=actor, how="provider answered"
                    )
            moved = await self._fail_over(sent, subject, failover, actor=actor)
            if moved is None:
                return FencedOut(sent.id, sent.fence)
            sent, subject = moved
            only_send = True

    def _failover(self, subject: SubjectT, answer: Any) -> Failover | None:
        """Why `subject` may move to its next attempt after `answer` (what the provider
        made, or an `Indefinite` that certainly was not processed), or None: it may not.

        A kind with one attempt never fails over (this default)."""
        return None

    async def _fail_over(
        self, sent: OwnedRef, subject: SubjectT, failover: Failover, *, actor: str
    ) -> tuple[OwnedRef, SubjectT] | None:
        """Write the move to the next attempt (fenced); the new reference and subject, or
        None when a newer owner holds the operation."""
        raise NotImplementedError(f"{type(self).__name__} has one attempt")

    async def fail_over_if_declined(
        self, ref: OwnedRef, subject: SubjectT, found: Any, *, actor: str
    ) -> Final | Indefinite | FencedOut | None:
        """Recovery found `found` under the latest attempt: if it is a decline another
        provider may take, fail over and send the next attempt (what that came to); None
        when it is to be recorded as it is."""
        failover = self._failover(subject, found)
        if failover is None:
            return None
        moved = await self._fail_over(ref, subject, failover, actor=actor)
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        sent, subject = moved
        return await self._call(sent, subject, actor=actor, only_send=True)

    async def send(
        self, ref: OwnedRef, trigger: Trigger, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Commit PROVIDER_REQUEST_SENT (send, retry or resend), then call the provider."""
        await self._failpoints.reach("after_claim")
        async with self._db.connection() as conn:
            sent = await operations.mark_sent(
                conn, ref, trigger, actor=actor, lease_s=self._lease_s
            )
            subject = await self._load(conn, ref.id)
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

    async def refresh(self, ref: OwnedRef) -> OwnedRef | None:
        """The operation as this owner holds it now; None if a newer owner took it."""
        async with self._db.connection() as conn:
            return await reads.owned(conn, ref)

    async def defer(
        self,
        unsent: Indefinite,
        *,
        noun: str,
        links: Mapping[str, str],
        actor: str,
    ) -> NotSent | FencedOut:
        """The provider certainly did not process it: FAILED_RETRYABLE, nothing stored.

        `noun` and `links` are the operation's kind's, for the problem the client gets."""
        ref = unsent.ref
        async with self._db.connection() as conn:
            moved = await operations.defer(conn, ref, actor=actor, reason=unsent.reason)
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        retry_after_s = max(1, math.ceil(unsent.retry_after_s or 1))
        return NotSent(ref.id, retry_after_s, noun, links)

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
            event = await self._attention_event(conn, ref) if schedule.needs_attention else None
            moved = await operations.mark_unknown(
                conn, ref, actor=actor, reason=reason, schedule=schedule, event=event
            )
        if moved is None:
            return FencedOut(ref.id, ref.fence)
        return Unknown(ref.id, schedule.attempts, schedule.delay_s, schedule.needs_attention)

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
        """One statement: the outcome, its audit row, the stored answer, the business
        object's result and the outcome's event, all or (fenced out) nothing. True when
        this owner's write landed."""
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

    async def _attention_event(self, conn: Connection, ref: OwnedRef) -> EventWrite | None:
        """The event written when the operation is first flagged `needs_attention`, if any."""
        return None
