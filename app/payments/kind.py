"""The payment as an operation kind: `create_payment`, registered in `app/composition.py`.

Everything a payment's operation is, in one class (the interface is `OperationKind`,
`app/operations/kinds.py`): its claim creates the payment with its derived provider key and
its route across providers (chosen here, once: `app/provider/routing.py`); its request is
the charge to the current attempt's provider; its lookup reads every attempt
(`attempts.py`); a decline retryable elsewhere, or a refusal of an attempt's only send,
moves it to its next attempt; each outcome is recorded with the payment's status, its
stored answer (`replies.py`) and its event. Operators see the charge the provider holds
under the payment's derived key, and the payment's route.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, ClassVar

from app.clock import utcnow
from app.db.database import Connection
from app.db.fragments import Searchable
from app.events.outbox import outcome_event
from app.events.rows import EventType
from app.ids import new_id
from app.observability.metrics import Metrics
from app.operations.kinds import (
    ClaimKey,
    Described,
    Failover,
    KindParts,
    Move,
    OperationKind,
    Prepared,
    Recording,
)
from app.operations.outcomes import Declined, Indefinite, Rejected, Succeeded
from app.operations.states import Trigger
from app.operations.values import EventWrite, OperationName, StoredResponse
from app.payments import attempts, replies, search
from app.payments import repository as payments
from app.payments.attempts import CIRCUIT_OPEN, DECLINED, NOT_PROCESSED, ChargeAt
from app.payments.rows import PaymentRow
from app.payments.schemas import CreatePaymentCommand
from app.payments.status import CAPTURE_WINDOW_S, PaymentStatus
from app.payments.views import payment_json
from app.provider.client import ChargeRequest
from app.provider.keys import derive_provider_key
from app.provider.registry import Providers
from app.provider.routing import RoutingTable
from app.tracing.spans import annotate


def links(payment_id: uuid.UUID) -> dict[str, str]:
    """The ids a problem about a payment's operation shows."""
    return {"payment_id": str(payment_id)}


class PaymentKind(OperationKind[CreatePaymentCommand, PaymentRow, ChargeAt]):
    """A payment: charged once under its derived key, at one provider of its route."""

    name: ClassVar[str] = OperationName.CREATE_PAYMENT
    noun: ClassVar[str] = "payment"
    record_name: ClassVar[str] = "charge"
    search: ClassVar[Searchable] = search

    def __init__(
        self,
        *,
        providers: Providers,
        routing: RoutingTable,
        metrics: Metrics,
        capture_window_s: int = CAPTURE_WINDOW_S,
    ):
        self._providers = providers
        self._routing = routing
        self._metrics = metrics
        # How long a manual payment's authorization may be captured (its `capture_before`).
        self._capture_window_s = capture_window_s

    @classmethod
    def build(cls, parts: KindParts) -> PaymentKind:
        return cls(
            providers=parts.providers,
            routing=parts.routing,
            metrics=parts.metrics,
            capture_window_s=parts.settings.capture_window_s,
        )

    # The claim.

    async def prepare(
        self, conn: Connection, key: ClaimKey, command: CreatePaymentCommand
    ) -> Prepared[PaymentRow]:
        """The payment, PENDING with its derived key and its route; no read needed."""
        payment_id = new_id(utcnow())
        provider_key = derive_provider_key(payment_id)
        route = self._routing.route(key.tenant_id, command.currency, command.amount_minor)

        def claimed(at: Any) -> PaymentRow:
            self._metrics.attempt_begun(route[0])
            return payments.as_claimed(
                payment_id=payment_id,
                tenant_id=key.tenant_id,
                operation_id=key.operation_id,
                provider_key=provider_key,
                route=route,
                command=command,
                at=at,
                capture_window_s=self._capture_window_s,
            )

        return Prepared(
            write=payments.created_with_claim(
                payment_id=payment_id,
                tenant_id=key.tenant_id,
                provider_key=provider_key,
                route=route,
                command=command,
                capture_window_s=self._capture_window_s,
            ),
            claimed=claimed,
            # The claim's send, as the history tells it: the provider too, when there is a
            # choice.
            send_reason=None
            if len(route) == 1
            else f"calling the provider: {route[0]} (attempt 0)",
        )

    def links(self, subject: PaymentRow) -> dict[str, str]:
        return links(subject.id)

    # The provider.

    async def request(self, subject: PaymentRow) -> ChargeAt:
        name = subject.provider
        annotate(provider=name, provider_attempt=subject.attempt)
        charge = await self._providers[name].create_charge(_charge_request(subject))
        return ChargeAt(charge, subject.attempt, name)

    async def look_up(self, subject: PaymentRow) -> ChargeAt | None:
        return await attempts.look_up(self._providers, subject)

    # What to record.

    def found(
        self, subject: PaymentRow, found: ChargeAt, *, operation_id: uuid.UUID, how: str
    ) -> Recording:
        """The provider has a charge (approved, authorized or declined): COMPLETED, answer
        stored."""
        payment, charge = subject, found.charge
        # With several providers on its route, the history names the one holding the outcome.
        where = f" at {found.provider} (attempt {found.attempt})" if len(payment.route) > 1 else ""
        at = utcnow()
        status, event_type = _OUTCOMES[charge.status]
        succeeded = status is not PaymentStatus.DECLINED
        # The payment as the outcome leaves it: its event's data and, approved, its answer.
        data = payment_json(
            payment,
            status=status.value,
            provider_charge_id=charge.charge_id,
            decline_code=charge.decline_code,
            updated_at=at,
            amount_captured_minor=payment.amount_minor if status is PaymentStatus.SUCCEEDED else 0,
        )
        stored = replies.charged(payment, charge, operation_id=operation_id, body=data)
        return Recording(
            trigger=Trigger.COMPLETE,
            reason=f"{how}: {charge.status}{where}",
            stored=stored,
            write=payments.result_with_outcome(
                payment.id,
                status=status,
                provider_charge_id=charge.charge_id,
                decline_code=charge.decline_code,
                attempt=found.attempt,
                at=at,
            ),
            event=outcome_event(tenant_id=payment.tenant_id, type=event_type, data=data),
            outcome=(
                Succeeded(operation_id, stored)
                if succeeded
                else Declined(operation_id, charge.decline_code or "declined", stored)
            ),
        )

    def rejected(self, subject: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> Recording:
        """The provider refused the request as invalid, nothing charged: FAILED, stored."""
        stored = replies.rejected(subject, detail, operation_id=operation_id)
        reason = f"provider rejected the request: {detail}"
        return _failed(subject, detail, stored, operation_id=operation_id, reason=reason)

    def no_effect(self, subject: PaymentRow, *, operation_id: uuid.UUID, reason: str) -> Recording:
        """Not charged, as an operator resolved it after a lookup that found no charge."""
        detail = "an operator resolved it as not charged; the provider holds no charge"
        stored = replies.not_charged(subject, detail, operation_id=operation_id)
        return _failed(subject, detail, stored, operation_id=operation_id, reason=reason)

    def attention_event(self, subject: PaymentRow) -> EventWrite:
        """payment.needs_attention, with the payment as it stands."""
        return outcome_event(
            tenant_id=subject.tenant_id,
            type=EventType.PAYMENT_NEEDS_ATTENTION,
            data=payment_json(subject),
        )

    def failover(self, subject: PaymentRow, answer: ChargeAt | Indefinite) -> Failover | None:
        """Why the payment may go to its next provider after `answer`, or None.

        Only when the attempt charged nothing and never will: its provider declined it with
        a code the routing marks retryable elsewhere (the decline stays under the attempt's
        key, so that key can never charge), or the attempt's only send was certainly not
        processed (the driver passes a refusal only then). Never after a timeout or any
        other unknown outcome: those are looked up at that provider first.
        """
        nxt = subject.next_provider
        if nxt is None:
            return None
        here = f"{subject.provider} (attempt {subject.attempt})"
        there = f"attempt {subject.attempt + 1} at {nxt}"
        if isinstance(answer, ChargeAt):
            code = answer.charge.decline_code
            declined = answer.charge.status == "declined"
            if not declined or not self._routing.retries_elsewhere(code):
                return None
            reason = f"failover: {here} declined {code}, retryable elsewhere; {there}"
            return Failover(DECLINED, reason, code)
        if answer.not_sent:
            if answer.circuit_open:
                reason = f"failover: {here} held back by its circuit breaker; {there}"
                return Failover(CIRCUIT_OPEN, reason)
            reason = f"failover: {here} did not process the only send ({answer.reason}); {there}"
            return Failover(NOT_PROCESSED, reason, answer.reason)
        return None

    def next_attempt(self, subject: PaymentRow, failover: Failover) -> Move[PaymentRow]:
        return Move(
            write=payments.next_attempt(subject, failover.cause, failover.detail),
            subject=replace(subject, attempt=subject.attempt + 1),
            from_provider=subject.provider,
            to_provider=subject.route[subject.attempt + 1],
        )

    # Reading.

    async def load(
        self, conn: Connection, operation_id: uuid.UUID, created_at: datetime
    ) -> PaymentRow:
        return await payments.get_for_operation(conn, operation_id, created_at)

    async def load_many(
        self, conn: Connection, operations: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, PaymentRow]:
        return await payments.get_for_operations(conn, operations)

    async def operation_for_key(self, conn: Connection, provider_key: str) -> uuid.UUID | None:
        return await payments.operation_for_key(conn, provider_key)

    # What operators see.

    async def describe(
        self, conn: Connection, operation_id: uuid.UUID, created_at: datetime
    ) -> Described | None:
        """The payment, and its route: each attempt's provider and key, where it stands, and
        for one left behind, its failover (never in `payment_json`: tenants' answers are
        stored and replayed byte for byte)."""
        try:
            payment = await payments.get_for_operation(conn, operation_id, created_at)
        except LookupError:
            return None
        moved = await attempts.of_payment(conn, payment.tenant_id, payment.id)
        left = {failover.from_attempt: failover.json() for failover in moved}
        attempts_shown = [
            {
                "attempt": n,
                "provider": name,
                "provider_key": payment.attempt_key(n),
                "state": payment.standing(n),
                "failover": left.get(n),
            }
            for n, name in enumerate(payment.route)
        ]
        body = self.body(payment) | {
            "route": list(payment.route),
            "attempt": payment.attempt,
            "attempts": attempts_shown,
        }
        return Described(self.noun, body, payment)

    def body(self, subject: PaymentRow) -> dict[str, Any]:
        return payment_json(subject)

    def took_effect(self, found: ChargeAt) -> bool:
        # An authorization took effect too: the provider holds the payer's money.
        return found.charge.status != "declined"

    def show(self, found: ChargeAt) -> dict[str, Any]:
        return {
            "charge_id": found.charge.charge_id,
            "status": found.charge.status,
            "decline_code": found.charge.decline_code,
            "provider": found.provider,
            "attempt": found.attempt,
        }


def _failed(
    payment: PaymentRow,
    detail: str,
    stored: StoredResponse,
    *,
    operation_id: uuid.UUID,
    reason: str,
) -> Recording:
    at = utcnow()
    return Recording(
        trigger=Trigger.FAIL,
        reason=reason,
        stored=stored,
        write=payments.result_with_outcome(
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
        outcome=Rejected(operation_id, detail, stored),
    )


def _charge_request(payment: PaymentRow) -> ChargeRequest:
    """Every call for a payment's attempt sends the same values under the attempt's key."""
    return ChargeRequest(
        provider_key=payment.attempt_key(),
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        account_id=payment.account_id,
        reference=str(payment.id),
        manual_capture=payment.manual,
    )


# What each answer of the provider makes of the payment: its status, and its event.
_OUTCOMES = {
    "succeeded": (PaymentStatus.SUCCEEDED, EventType.PAYMENT_SUCCEEDED),
    "authorized": (PaymentStatus.AUTHORIZED, EventType.PAYMENT_AUTHORIZED),
    "declined": (PaymentStatus.DECLINED, EventType.PAYMENT_DECLINED),
}
