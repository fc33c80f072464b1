"""Reconciling one owned operation against the provider: shared by the worker and API retries.

Asking before acting is what makes recovery safe: look the charge (or refund) up by its
derived key (a payment's every attempt, each at its own provider); if the provider has it,
record that definite outcome, unless it is the latest attempt's decline that another
provider may take, which fails over to the next attempt; if it certainly does not, send it
again with the same key (the provider deduplicates, so a first request that lands late
cannot make a second charge); if the provider cannot say, stay unknown and check again
later, on the schedule the recovery policy sets.

The reconciler drives any kind through its generic driver (`app/operations/driver.py`),
which asks the kind (`app/operations/kinds.py`) what to look up, send and record; recovery
names no kind.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Generic, TypeVar

from app.db.database import Connection
from app.operations.driver import Driver
from app.operations.outcomes import FencedOut, Final, Indefinite, Outcome, Unknown
from app.operations.states import State, Trigger
from app.operations.values import OwnedRef
from app.provider.errors import LookupFailed
from app.recovery.policy import RecoveryPolicy

SubjectT = TypeVar("SubjectT")
FoundT = TypeVar("FoundT")


def resend_trigger(state: State) -> Trigger:
    """The trigger of a recovery's send after a lookup that found nothing: SEND for an
    operation never sent (RECEIVED, left between a claim's two commits), RESEND otherwise."""
    return Trigger.SEND if state is State.RECEIVED else Trigger.RESEND


def counts_as_check(sent: Indefinite) -> bool:
    """Whether a recovery send without a definite answer counts as a check that settled
    nothing (an attempt, towards `needs_attention`). Every one does, a resend the provider
    certainly did not process included (an earlier request under the key may still land),
    but for one the circuit breaker held back: nothing was sent and nothing checked."""
    return not sent.circuit_open


class Reconciler(Generic[SubjectT, FoundT]):
    """Finds out what happened to an owned operation and records it."""

    def __init__(self, *, driver: Driver[SubjectT, FoundT], policy: RecoveryPolicy):
        self.driver = driver
        self._policy = policy

    async def load_subjects(
        self, conn: Connection, operations: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, SubjectT]:
        """The business objects of a batch of operations (their ids and days), read at once
        (the worker's claim)."""
        return await self.driver.load_many(conn, operations)

    async def reconcile(
        self, ref: OwnedRef, *, actor: str, subject: SubjectT | None = None
    ) -> Outcome:
        """Drive `ref` to a definite outcome if the provider allows; what it came to.

        `subject`, the operation's business object when the caller has read it already, saves
        the driver that read.
        """
        try:
            subject, found = await self.driver.lookup(ref, subject)
        except LookupFailed as exc:
            return await self._still_unknown(ref, f"provider lookup failed: {exc}", actor)
        sent: Final | Indefinite | FencedOut | None
        if found is not None:
            # A decline retryable elsewhere moves to the next attempt and sends it (its only
            # send); anything else found is the outcome.
            sent = await self.driver.fail_over_if_declined(ref, subject, found, actor=actor)
            if sent is None:
                return await self.driver.record_found(
                    ref, subject, found, actor=actor, how="found by provider lookup"
                )
        else:
            # The provider has nothing under this key: sending it again is safe, since the
            # provider deduplicates on the same derived key should the first request land
            # late.
            sent = await self.driver.send(ref, resend_trigger(ref.state), actor=actor)
        if not isinstance(sent, Indefinite):
            return sent
        if not counts_as_check(sent):
            # Held back by the circuit breaker: nothing was sent and nothing checked, so no
            # attempt is counted; the operation is due again when the cool-down ends.
            schedule = self._policy.while_circuit_open(sent.ref.attempts, sent.retry_after_s)
            return await self.driver.record_unknown(
                sent.ref, actor=actor, reason=sent.reason, schedule=schedule
            )
        # Even a resend the provider certainly did not process settles nothing: an earlier
        # request under the same key may still be on its way. The outcome stays unknown.
        reason = ("resend not processed by the provider: " if sent.not_sent else "") + sent.reason
        return await self._still_unknown(sent.ref, reason, actor)

    async def record_failure(self, ref: OwnedRef, error: Exception, *, actor: str) -> Outcome:
        """A reconcile that raised counts as a check that settled nothing.

        Otherwise the operation would be claimed again every lease period, forever, and
        never reach `needs_attention`. The owner may have moved the operation before the
        error (to PROVIDER_REQUEST_SENT, say), so its current state is read first.
        """
        current = await self.driver.refresh(ref)
        if current is None:
            return FencedOut(ref.id, ref.fence)
        reason = f"reconcile failed: {type(error).__name__}: {error}"
        return await self._still_unknown(current, reason, actor)

    async def _still_unknown(self, ref: OwnedRef, reason: str, actor: str) -> Unknown | FencedOut:
        schedule = self._policy.after_check(ref.attempts)
        return await self.driver.record_unknown(ref, actor=actor, reason=reason, schedule=schedule)
