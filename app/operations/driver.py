"""What every driver does as an operation's owner, whatever the operation acts on.

A driver (`payments/driver.py`, `refunds/driver.py`) owns the provider calls of one kind
of operation. The steps that are the same for every kind live here, once:
1. commit PROVIDER_REQUEST_SENT (fenced) before the call (`send`), or, right after a claim
   that committed it, go straight to the call (`call`);
2. the call itself, with no transaction open (`_call`): the subclass makes the request
   (`_request`); what the provider's answer or error means is decided here, once;
3. record what came of it, fenced: a final outcome with its stored answer and the business
   object's write in one statement (`_record_final`), FAILED_RETRYABLE (`defer`) or
   UNKNOWN_REQUIRES_RECOVERY on the recovery schedule (`record_unknown`).
A write that finds a newer owner returns `FencedOut` and leaves the operation to it.
"""

from __future__ import annotations

import logging
import math
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
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
        self, sent: OwnedRef, subject: SubjectT, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Call the provider and record a definite answer; an indefinite one comes back.

        No transaction is open across this call: it may take up to the provider timeout.
        """
        annotate(operation_id=str(sent.id), fence=sent.fence, attempt=sent.attempts)
        try:
            found = await self._request(subject)
        except RequestRejected as exc:
            return await self._record_rejected(sent, subject, str(exc), actor=actor)
        except RequestNotSent as exc:
            return Indefinite(
                sent,
                str(exc),
                not_sent=True,
                retry_after_s=exc.retry_after,
                circuit_open=isinstance(exc, CircuitOpen),
            )
        except OutcomeUnknown as exc:
            return Indefinite(sent, f"outcome unknown: {exc}", not_sent=False)
        return await self.record_found(sent, subject, found, actor=actor, how="provider answered")

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
        return await self._call(sent, subject, actor=actor)

    async def call(
        self, sent: OwnedRef, subject: SubjectT, *, actor: str
    ) -> Final | Indefinite | FencedOut:
        """Call the provider for an operation whose claim committed PROVIDER_REQUEST_SENT."""
        await self._failpoints.reach("after_claim")
        return await self._call(sent, subject, actor=actor)

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
