"""Driving one payment through the provider call and recording what came of it.

The mechanism both the create flow and recovery use; what an indefinite answer means is
theirs to decide (`Indefinite`), so no policy lives here. The steps every operation shares
(PROVIDER_REQUEST_SENT before the call, fenced outcomes after it) are `OperationDriver`'s
(`app/operations/driver.py`); this module adds what is a payment's own: the charge request
to the current attempt's provider, the lookup of every attempt (`attempts.py`), the failover
to the next provider when the answer proves the attempt charged nothing, and the payment's
status and event written with the outcome.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace

from app.clock import utcnow
from app.db.database import Connection, Database
from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.failpoints import Failpoints
from app.operations import repository as operations
from app.operations.driver import Failover, OperationDriver
from app.operations.outcomes import (
    Declined,
    FencedOut,
    Indefinite,
    Rejected,
    Succeeded,
)
from app.operations.states import Trigger
from app.operations.values import EventWrite, OwnedRef, StoredResponse
from app.payments import attempts, replies
from app.payments import repository as payments
from app.payments.attempts import ChargeAt
from app.payments.causes import CIRCUIT_OPEN, DECLINED, NOT_PROCESSED
from app.payments.rows import PaymentRow
from app.payments.status import PaymentStatus
from app.payments.views import payment_json
from app.provider.client import ChargeRequest
from app.provider.registry import Providers
from app.provider.routing import RoutingTable
from app.tracing.spans import annotate

logger = logging.getLogger("payments.charging")

# Called once per failover with (from provider, to provider, cause): the metrics' hook.
FailoverObserver = Callable[[str, str, str], None]


class ChargeDriver(OperationDriver[PaymentRow]):
    """Sends a payment's charge, looks it up, and records outcomes as the operation's owner."""

    def __init__(
        self,
        *,
        db: Database,
        providers: Providers,
        routing: RoutingTable,
        lease_s: float,
        failpoints: Failpoints,
        on_failover: FailoverObserver | None = None,
    ):
        super().__init__(db=db, lease_s=lease_s, failpoints=failpoints)
        self._providers = providers
        self._routing = routing
        self._on_failover = on_failover

    async def _load(self, conn: Connection, operation_id: uuid.UUID) -> PaymentRow:
        return await payments.get_for_operation(conn, operation_id)

    async def load_many(
        self, conn: Connection, operation_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, PaymentRow]:
        return await payments.get_for_operations(conn, operation_ids)

    async def _request(self, subject: PaymentRow) -> ChargeAt:
        annotate(provider=subject.provider, provider_attempt=subject.attempt)
        provider = self._providers[subject.provider]
        charge = await provider.create_charge(_charge_request(subject))
        return ChargeAt(charge, subject.attempt, subject.provider)

    async def lookup(
        self, ref: OwnedRef, payment: PaymentRow | None = None
    ) -> tuple[PaymentRow, ChargeAt | None]:
        """The payment (read unless given) and what its attempts hold (`attempts.look_up`).

        Raises `LookupFailed` when a provider cannot say.
        """
        if payment is None:
            async with self._db.connection() as conn:
                payment = await payments.get_for_operation(conn, ref.id)
        return payment, await attempts.look_up(self._providers, payment)

    def _failover(self, subject: PaymentRow, answer: object) -> Failover | None:
        """Why the payment may go to its next provider after `answer`, or None.

        Only when the attempt charged nothing and never will: its provider declined it with
        a code the routing marks retryable elsewhere (the decline stays under the attempt's
        key, so that key can never charge), or the attempt's only send was certainly not
        processed (the caller passes a refusal only then). Never after a timeout or any other
        unknown outcome: those are looked up at that provider first.
        """
        nxt = subject.next_provider
        if nxt is None:
            return None
        here = f"{subject.provider} (attempt {subject.attempt})"
        there = f"attempt {subject.attempt + 1} at {nxt}"
        if isinstance(answer, ChargeAt):
            code = answer.charge.decline_code
            if answer.succeeded or not self._routing.retries_elsewhere(code):
                return None
            reason = f"failover: {here} declined {code}, retryable elsewhere; {there}"
            return Failover(DECLINED, reason, code)
        if isinstance(answer, Indefinite) and answer.not_sent:
            if answer.circuit_open:
                reason = f"failover: {here} held back by its circuit breaker; {there}"
                return Failover(CIRCUIT_OPEN, reason)
            reason = f"failover: {here} did not process the only send ({answer.reason}); {there}"
            return Failover(NOT_PROCESSED, reason, answer.reason)
        return None

    async def _fail_over(
        self, sent: OwnedRef, subject: PaymentRow, failover: Failover, *, actor: str
    ) -> tuple[OwnedRef, PaymentRow] | None:
        async with self._db.connection() as conn:
            moved = await operations.fail_over(
                conn,
                sent,
                actor=actor,
                reason=failover.reason,
                lease_s=self._lease_s,
                subject=payments.next_attempt(subject, failover.cause, failover.detail),
            )
        if moved is None:
            return None
        await self._failpoints.reach("after_failover")
        to = subject.route[subject.attempt + 1]
        if self._on_failover is not None:
            self._on_failover(subject.provider, to, failover.cause)
        fields = {"operation_id": str(sent.id), "from": subject.provider, "to": to}
        logger.info("payment failed over", extra={"fields": fields | {"cause": failover.cause}})
        return moved, replace(subject, attempt=subject.attempt + 1)

    async def record_found(
        self, ref: OwnedRef, payment: PaymentRow, found: ChargeAt, *, actor: str, how: str
    ) -> Succeeded | Declined | FencedOut:
        """The provider has a charge (approved or declined): COMPLETED, answer stored."""
        await self._failpoints.reach("before_record")
        charge = found.charge
        # With several providers on its route, the history names the one holding the outcome.
        where = f" at {found.provider} (attempt {found.attempt})" if len(payment.route) > 1 else ""
        at = utcnow()
        stored = replies.charged(payment, charge, operation_id=ref.id, at=at)
        status = PaymentStatus.SUCCEEDED if charge.status == "succeeded" else PaymentStatus.DECLINED
        data = payment_json(
            payment,
            status=status.value,
            provider_charge_id=charge.charge_id,
            decline_code=charge.decline_code,
            updated_at=at,
        )
        kind = (
            EventType.PAYMENT_SUCCEEDED
            if status is PaymentStatus.SUCCEEDED
            else EventType.PAYMENT_DECLINED
        )
        written = await self._record_final(
            ref,
            Trigger.COMPLETE,
            actor=actor,
            reason=f"{how}: {charge.status}{where}",
            stored=stored,
            result=payments.result_with_outcome(
                payment.id,
                status=status,
                provider_charge_id=charge.charge_id,
                decline_code=charge.decline_code,
                attempt=found.attempt,
                at=at,
            ),
            event=outcome_event(tenant_id=payment.tenant_id, type=kind, data=data),
        )
        if not written:
            return FencedOut(ref.id, ref.fence)
        if status is PaymentStatus.SUCCEEDED:
            return Succeeded(ref.id, stored)
        return Declined(ref.id, charge.decline_code or "declined", stored)

    async def _record_rejected(
        self, ref: OwnedRef, payment: PaymentRow, detail: str, *, actor: str
    ) -> Rejected | FencedOut:
        """The provider refused the request as invalid, nothing charged: FAILED, stored."""
        stored = replies.rejected(payment, detail, operation_id=ref.id)
        reason = f"provider rejected the request: {detail}"
        return await self._record_failed(ref, payment, detail, stored, actor=actor, reason=reason)

    async def record_not_charged(
        self, ref: OwnedRef, payment: PaymentRow, *, actor: str, reason: str
    ) -> Rejected | FencedOut:
        """Certainly not charged, as an operator resolved it after a provider lookup that
        found no charge: FAILED, with the answer a FAILED operation replays."""
        detail = "an operator resolved it as not charged; the provider holds no charge"
        stored = replies.not_charged(payment, detail, operation_id=ref.id)
        return await self._record_failed(ref, payment, detail, stored, actor=actor, reason=reason)

    async def _record_failed(
        self,
        ref: OwnedRef,
        payment: PaymentRow,
        detail: str,
        stored: StoredResponse,
        *,
        actor: str,
        reason: str,
    ) -> Rejected | FencedOut:
        at = utcnow()
        written = await self._record_final(
            ref,
            Trigger.FAIL,
            actor=actor,
            reason=reason,
            stored=stored,
            result=payments.result_with_outcome(
                payment.id,
                status=PaymentStatus.FAILED,
                provider_charge_id=None,
                decline_code=None,
                attempt=payment.attempt,
                at=at,
            ),
            event=outcome_event(
                tenant_id=payment.tenant_id,
                type=EventType.PAYMENT_FAILED,
                data=payment_json(payment, status=PaymentStatus.FAILED.value, updated_at=at),
            ),
        )
        if not written:
            return FencedOut(ref.id, ref.fence)
        return Rejected(ref.id, detail, stored)

    async def _attention_event(self, conn: Connection, ref: OwnedRef) -> EventWrite | None:
        """payment.needs_attention, with the payment as it stands.

        An operation whose payment cannot be read (a broken row, which is what made its
        reconcile fail) is still flagged; it gets no event, and the log says why.
        """
        try:
            payment = await payments.get_for_operation(conn, ref.id)
        except LookupError:
            logger.error("no needs-attention event: operation %s has no payment", ref.id)
            return None
        return outcome_event(
            tenant_id=payment.tenant_id,
            type=EventType.PAYMENT_NEEDS_ATTENTION,
            data=payment_json(payment),
        )


def _charge_request(payment: PaymentRow) -> ChargeRequest:
    """Every call for a payment's attempt sends the same values under the attempt's key."""
    return ChargeRequest(
        provider_key=payment.attempt_key(),
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        account_id=payment.account_id,
        reference=str(payment.id),
    )
