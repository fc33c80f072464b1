"""Reconciling one operation against the provider: shared by the worker and API retries.

The caller already owns the operation (its fence is in `ref`). Asking before acting is what
makes recovery safe: look the charge up by the payment's derived key; if the provider has it,
record that definite outcome; if it certainly does not, send it again with the same key (the
provider deduplicates); if the provider cannot say, stay unknown and check again later.
"""

from __future__ import annotations

from app.db.engine import SessionMaker, transaction
from app.idempotency.repository import OwnedRef
from app.idempotency.states import State, Trigger
from app.payments import repository as payments
from app.payments.charging import ChargeDriver
from app.payments.replies import Reply
from app.provider.client import ProviderClient
from app.provider.errors import LookupFailed


class Reconciler:
    """Finds out what happened to an owned operation and records it."""

    def __init__(self, *, sessions: SessionMaker, provider: ProviderClient, driver: ChargeDriver):
        self._sessions = sessions
        self._provider = provider
        self._driver = driver

    async def reconcile(self, ref: OwnedRef, *, actor: str, inline: bool) -> Reply:
        """Drive `ref` to a definite outcome if the provider allows; the reply to give.

        `inline` is a client's retry doing the work: a failed look-up then does not count
        against the operation's attempts, which pace the worker's schedule.
        """
        async with transaction(self._sessions) as session:
            payment = await payments.get_for_operation(session, ref.id)
        try:
            charge = await self._provider.find_charge(payment.provider_key)
        except LookupFailed as exc:
            return await self._driver.record_unknown(
                ref, f"provider lookup failed: {exc}", actor=actor, count_attempt=not inline
            )
        if charge is not None:
            return await self._driver.record_charge(
                ref, payment, charge, actor=actor, reason="found by provider lookup"
            )
        # The provider has no charge under this key: sending it again is safe, since the
        # provider deduplicates on the same derived key should the first call land late.
        trigger = Trigger.SEND if ref.state is State.RECEIVED else Trigger.RESEND
        return await self._driver.send(
            ref, trigger, actor=actor, recovering=True, count_attempt=not inline
        )
