"""Driving one payment through the provider call and recording what came of it.

The sequence keeps the transaction boundaries of the spec:
1. commit PROVIDER_REQUEST_SENT (fenced) before the call;
2. call the provider with no transaction open;
3. record the outcome, the payment's new status and the reply a replay will return, in one
   fenced transaction.
Both the API (first attempt, retry of FAILED_RETRYABLE) and recovery (resend after a lookup
found nothing) drive payments through here; recovery also records lookups' findings here.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.engine import SessionMaker, transaction
from app.errors import problem_body
from app.failpoints import Failpoints
from app.idempotency import repository as operations
from app.idempotency.models import Operation
from app.idempotency.repository import OwnedRef
from app.idempotency.states import TERMINAL, Trigger
from app.operations.views import operation_json
from app.payments import repository as payments
from app.payments.models import Payment
from app.payments.replies import (
    Reply,
    json_reply,
    operation_location,
    payment_location,
    problem_reply,
    stored_reply,
)
from app.payments.schemas import payment_json
from app.payments.status import PaymentStatus
from app.provider.client import Charge, ChargeRequest, ProviderClient
from app.provider.errors import ChargeNotSent, ChargeRejected, OutcomeUnknown
from app.recovery.backoff import next_delay_s
from app.settings import Settings

logger = logging.getLogger("payments.charging")


class _FencedOut(Exception):
    """A newer owner holds the operation; roll back and answer with its current state."""


class ChargeDriver:
    """Sends a payment's charge and records outcomes, always as the operation's owner."""

    def __init__(self, *, sessions: SessionMaker, provider: ProviderClient, settings: Settings):
        self._sessions = sessions
        self._provider = provider
        self._settings = settings
        self._failpoints = Failpoints.parse(settings.failpoints)

    async def send(
        self,
        ref: OwnedRef,
        trigger: Trigger,
        *,
        actor: str,
        recovering: bool = False,
        count_attempt: bool = False,
    ) -> Reply:
        """Commit PROVIDER_REQUEST_SENT, call the provider, record the outcome.

        `recovering`: a resend by recovery; if it is not processed the operation stays
        unknown rather than FAILED_RETRYABLE. `count_attempt`: an indefinite answer counts
        against the operation's attempts (the worker's checks do, client requests do not).
        """
        await self._failpoints.reach("after_claim")
        async with transaction(self._sessions) as session:
            sent = await operations.apply(
                session, ref, trigger, actor=actor, reason="calling the provider"
            )
            payment = await payments.get_for_operation(session, ref.id)
        if sent is None:
            return await self.current_reply(ref)
        # No transaction is open across this call: it may take up to the provider timeout.
        request = ChargeRequest(
            provider_key=payment.provider_key,
            amount_minor=payment.amount_minor,
            currency=payment.currency,
            account_id=payment.account_id,
            reference=str(payment.id),
        )
        try:
            charge = await self._provider.create_charge(request)
        except ChargeRejected as exc:
            return await self.record_rejected(sent, payment, str(exc), actor=actor)
        except ChargeNotSent as exc:
            if recovering:
                # A recovery resend that did not go through leaves the outcome where it
                # was: still to be found out, on the recovery schedule.
                reason = f"resend not processed by the provider: {exc}"
                return await self.record_unknown(
                    sent, reason, actor=actor, count_attempt=count_attempt
                )
            return await self.record_not_sent(sent, payment, exc, actor=actor)
        except OutcomeUnknown as exc:
            reason = f"outcome unknown: {exc}"
            return await self.record_unknown(sent, reason, actor=actor, count_attempt=count_attempt)
        return await self.record_charge(
            sent, payment, charge, actor=actor, reason="provider answered"
        )

    async def record_charge(
        self, ref: OwnedRef, payment: Payment, charge: Charge, *, actor: str, reason: str
    ) -> Reply:
        """The provider has a charge (approved or declined): COMPLETED, reply stored."""
        await self._failpoints.reach("before_record")
        now = utcnow()
        if charge.status == "succeeded":
            status = PaymentStatus.SUCCEEDED
            reply = json_reply(
                201,
                payment_json(
                    payment,
                    status=status.value,
                    provider_charge_id=charge.charge_id,
                    updated_at=now,
                ),
                {"location": payment_location(payment.id)},
            )
        else:
            status = PaymentStatus.DECLINED
            code = charge.decline_code or "declined"
            reply = problem_reply(
                402,
                problem_body(
                    status=402,
                    code=code,
                    title="Payment declined",
                    detail=f"the provider declined the payment ({code})",
                    payment_id=str(payment.id),
                    operation_id=str(ref.id),
                ),
            )
        return await self._finish(
            ref,
            Trigger.COMPLETE,
            reply,
            actor=actor,
            reason=f"{reason}: {charge.status}",
            payment=payment,
            status=status,
            charge_id=charge.charge_id,
            decline_code=charge.decline_code,
            at=now,
        )

    async def record_rejected(
        self, ref: OwnedRef, payment: Payment, detail: str, *, actor: str
    ) -> Reply:
        """The provider refused the request as invalid, nothing charged: FAILED, stored."""
        reply = problem_reply(
            502,
            problem_body(
                status=502,
                code="PROVIDER_REJECTED",
                title="Provider rejected the payment",
                detail=f"the provider rejected the request; nothing was charged: {detail}",
                payment_id=str(payment.id),
                operation_id=str(ref.id),
            ),
        )
        return await self._finish(
            ref,
            Trigger.FAIL,
            reply,
            actor=actor,
            reason=f"provider rejected the request: {detail}",
            payment=payment,
            status=PaymentStatus.FAILED,
            charge_id=None,
            decline_code=None,
            at=utcnow(),
        )

    async def record_not_sent(
        self, ref: OwnedRef, payment: Payment, exc: ChargeNotSent, *, actor: str
    ) -> Reply:
        """The provider certainly did not process it: FAILED_RETRYABLE, nothing stored."""
        changes = {"lease_owner": None, "lease_expires_at": None, "last_error": str(exc)}
        try:
            async with transaction(self._sessions) as session:
                moved = await operations.apply(
                    session, ref, Trigger.DEFER, actor=actor, reason=str(exc), changes=changes
                )
                if moved is None:
                    raise _FencedOut
        except _FencedOut:
            return await self.current_reply(ref)
        retry_after = max(1, math.ceil(exc.retry_after or 1))
        return problem_reply(
            503,
            problem_body(
                status=503,
                code="PROVIDER_UNAVAILABLE",
                title="Provider unavailable",
                detail="the provider did not process the payment; retry with the same "
                "Idempotency-Key",
                payment_id=str(payment.id),
                operation_id=str(ref.id),
            ),
            {"retry-after": str(retry_after)},
        )

    async def record_unknown(
        self, ref: OwnedRef, reason: str, *, actor: str, count_attempt: bool
    ) -> Reply:
        """No definite answer: UNKNOWN_REQUIRES_RECOVERY, next check scheduled, 202."""
        attempts = ref.attempts + 1 if count_attempt else ref.attempts
        delay = next_delay_s(
            attempts, base_s=self._settings.backoff_base_s, max_s=self._settings.backoff_max_s
        )
        changes: dict[str, Any] = {
            "lease_owner": None,
            "lease_expires_at": None,
            "last_error": reason,
            "attempts": attempts,
            "next_check_at": func.now() + timedelta(seconds=delay),
        }
        if attempts >= self._settings.max_attempts:
            # Never guess an outcome: flag it for a person and keep checking at the cap.
            changes["needs_attention"] = True
            logger.warning(
                "operation needs attention",
                extra={"fields": {"operation_id": str(ref.id), "attempts": attempts}},
            )
        try:
            async with transaction(self._sessions) as session:
                moved = await operations.apply(
                    session, ref, Trigger.LOSE, actor=actor, reason=reason, changes=changes
                )
                if moved is None:
                    raise _FencedOut
                return await self._accepted(session, ref)
        except _FencedOut:
            return await self.current_reply(ref)

    async def current_reply(self, ref: OwnedRef) -> Reply:
        """What the operation says now (for an owner that was fenced out)."""
        logger.info(
            "fenced out: a newer owner holds the operation",
            extra={"fields": {"operation_id": str(ref.id), "fence": ref.fence}},
        )
        async with transaction(self._sessions) as session:
            snapshot = await operations.get_snapshot(
                session, ref.id, key_ttl_s=self._settings.key_ttl_s
            )
            assert snapshot is not None
            if snapshot.state in TERMINAL:
                return stored_reply(snapshot.operation, replayed=True)
            return await self._accepted(session, ref)

    async def _accepted(self, session: AsyncSession, ref: OwnedRef) -> Reply:
        snapshot = await operations.get_snapshot(
            session, ref.id, key_ttl_s=self._settings.key_ttl_s
        )
        assert snapshot is not None
        return accepted_reply(snapshot.operation, await operation_json(session, snapshot.operation))

    async def _finish(
        self,
        ref: OwnedRef,
        trigger: Trigger,
        reply: Reply,
        *,
        actor: str,
        reason: str,
        payment: Payment,
        status: PaymentStatus,
        charge_id: str | None,
        decline_code: str | None,
        at: datetime,
    ) -> Reply:
        """Record a final outcome: state, payment and stored reply in one transaction."""
        changes = {
            "lease_owner": None,
            "lease_expires_at": None,
            "needs_attention": False,
            "next_check_at": None,
            "last_error": None,
            "completed_at": func.now(),
            "response_status": reply.status,
            "response_headers": reply.stored_headers(),
            "response_body": reply.body.decode(),
        }
        try:
            async with transaction(self._sessions) as session:
                moved = await operations.apply(
                    session, ref, trigger, actor=actor, reason=reason, changes=changes
                )
                if moved is None:
                    raise _FencedOut
                await payments.record_result(
                    session,
                    payment.id,
                    status=status,
                    provider_charge_id=charge_id,
                    decline_code=decline_code,
                    at=at,
                )
        except _FencedOut:
            return await self.current_reply(ref)
        return reply


def accepted_reply(operation: Operation, body: dict[str, Any]) -> Reply:
    """`202 Accepted` with the operation: the outcome is not known yet."""
    retry_after = 1
    if operation.next_check_at is not None:
        wait = (operation.next_check_at - utcnow()).total_seconds()
        retry_after = min(60, max(1, math.ceil(wait)))
    return json_reply(
        202,
        body,
        {"location": operation_location(operation.id), "retry-after": str(retry_after)},
    )
