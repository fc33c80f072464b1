"""A payment's attempts across providers: what each holds, and what they come to together.

Attempt n of a payment goes to provider `route[n]` under `attempt_key(provider_key, n)`
(`app/provider/keys.py`); the payment row names the current attempt. Moving on is the
driver's failover (`driver.py`), allowed only from an attempt that charged nothing and never
will: a decline the routing marks retryable elsewhere, or a refusal of the attempt's only
send. A timeout or an unknown outcome never moves on.

Recovery, inline or the worker's, and operators look up every attempt up to the current
one (`look_up`): a charge under any of them is the payment's charge; failing that, the
current attempt's decline (which may fail over); failing that, nothing, and the current
attempt is sent again under its own key. Under the failover rule an earlier attempt never
holds a charge, so the extra lookups find nothing; they are made anyway, because that is
what catches a provider whose "not processed" was wrong before the payment is charged a
second time elsewhere (tests/failover/test_wrong_not_processed.py, and the model's
`latest-attempt-only`). A payment with one attempt costs one lookup, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.payments.rows import PaymentRow
from app.provider.client import Charge
from app.provider.registry import Providers


@dataclass(frozen=True)
class ChargeAt:
    """A charge (approved or declined) as one attempt's provider holds it."""

    charge: Charge
    attempt: int
    provider: str

    @property
    def succeeded(self) -> bool:
        return self.charge.status == "succeeded"


async def look_up(providers: Providers, payment: PaymentRow) -> ChargeAt | None:
    """What the payment's attempts hold, as recovery reads it (see the module's docstring).

    Raises `LookupFailed` when any attempt's provider cannot say, and `UnknownProvider`
    for an attempt whose provider is no longer configured: nothing can be concluded then.
    """
    latest: ChargeAt | None = None
    for attempt in range(payment.attempt + 1):
        name = payment.route[attempt]
        charge = await providers[name].find_charge(payment.attempt_key(attempt))
        if charge is None:
            continue
        found = ChargeAt(charge, attempt, name)
        if found.succeeded:
            return found
        if attempt == payment.attempt:
            latest = found
    return latest
