"""A payment's attempts across providers: what each holds, why one is left for the next
(the failover's three causes), and the failovers' records.

Attempt n of a payment goes to provider `route[n]` under `attempt_key(provider_key, n)`
(`app/provider/keys.py`); the payment row names the current attempt. Moving on is a
failover (`app/payments/kind.py` decides when, `CAUSES` names why), allowed only from an
attempt that charged nothing and never will: a decline the routing marks retryable
elsewhere, or a refusal of the attempt's only send. A timeout or an unknown outcome never
moves on.

    declined        its provider declined it with a code the routing retries elsewhere
    not_processed   its only send was certainly not processed (refused, never reached)
    circuit_open    its provider's circuit breaker held the send back

Each cause is a label of `payments_provider_failovers_total{cause}` and a value of
`payment_failovers.cause` (checked by the table).

Recovery, inline or the worker's, and operators look up every attempt up to the current
one (`look_up`): a charge under any of them is the payment's charge; failing that, the
current attempt's decline (which may fail over); failing that, nothing, and the current
attempt is sent again under its own key. Under the failover rule an earlier attempt never
holds a charge, so the extra lookups find nothing; they are made anyway, because that is
what catches a provider whose "not processed" was wrong before the payment is charged a
second time elsewhere (tests/failover/test_wrong_not_processed.py, and the model's
`latest-attempt-only`). A payment with one attempt costs one lookup, as before.

A failover's fenced statement writes three things at once: the operation's transition
(audited, with the reason in words), the payment's next attempt, and a `payment_failovers`
row (`RECORD_SQL`: the same facts in columns: from where, to where, why, the decline code
or the send's error). The row exists exactly when the transition does, and names it
(`transition_id`), so a timeline can show a transition's failover. Operators read them two
ways: the dashboard counts a window's by from -> to and cause (`counts`, through the
table's `created_at` index); a payment's page and the admin API say why each attempt was
left behind (`of_payment`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.clock import iso
from app.db.database import Connection
from app.payments.rows import PaymentRow
from app.provider.client import Charge
from app.provider.registry import Providers

DECLINED, NOT_PROCESSED, CIRCUIT_OPEN = "declined", "not_processed", "circuit_open"
CAUSES = (DECLINED, NOT_PROCESSED, CIRCUIT_OPEN)


@dataclass(frozen=True)
class ChargeAt:
    """A charge (approved or declined) as one attempt's provider holds it."""

    charge: Charge
    attempt: int
    provider: str

    @property
    def succeeded(self) -> bool:
        """Approved: charged, or (manual capture) authorized; anything but a decline."""
        return self.charge.status != "declined"


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


# Run by the failover's statement, after its audit row (`audit`, which returns its id and
# time) and only when that exists: fenced out, nothing is written.
RECORD_SQL = """
    INSERT INTO payment_failovers (tenant_id, transition_id, payment_id, from_attempt,
                                   from_provider, to_provider, cause, detail, created_at)
    SELECT %(s_tenant_id)s, audit.id, %(s_id)s, %(s_attempt)s - 1, %(s_from_provider)s,
           %(s_to_provider)s, %(s_cause)s, %(s_detail)s, audit.created_at
    FROM audit
"""


@dataclass(frozen=True)
class FailoverRecord:
    """One failover of one payment: attempt `from_attempt` at `from_provider` left behind
    for the next attempt at `to_provider`."""

    transition_id: int
    from_attempt: int
    from_provider: str
    to_provider: str
    cause: str
    # The decline code (declined), or why the only send was not processed (not_processed).
    detail: str | None
    created_at: datetime

    @property
    def to_attempt(self) -> int:
        return self.from_attempt + 1

    @property
    def summary(self) -> str:
        return summary(self.cause, self.detail)

    def json(self) -> dict[str, Any]:
        """As the admin API shows it, on the attempt left behind."""
        return {
            "to_provider": self.to_provider,
            "to_attempt": self.to_attempt,
            "cause": self.cause,
            "detail": self.detail,
            "transition_id": self.transition_id,
            "at": iso(self.created_at),
        }


def summary(cause: str, detail: str | None) -> str:
    """Why, in a few words: `declined processor_declined, retryable elsewhere`."""
    if cause == DECLINED:
        return f"declined {detail}, retryable elsewhere"
    if cause == NOT_PROCESSED:
        return f"not processed ({detail})"
    if cause == CIRCUIT_OPEN:
        return "held back by its circuit breaker"
    return cause


_OF_PAYMENT = """
    SELECT transition_id, from_attempt, from_provider, to_provider, cause, detail, created_at
    FROM payment_failovers WHERE tenant_id = %(tenant_id)s AND payment_id = %(payment_id)s
    ORDER BY from_attempt
"""


async def of_payment(
    conn: Connection, tenant_id: uuid.UUID, payment_id: uuid.UUID
) -> list[FailoverRecord]:
    """The payment's failovers, by the attempt each left behind."""
    params = {"tenant_id": tenant_id, "payment_id": payment_id}
    rows = await (await conn.execute(_OF_PAYMENT, params)).fetchall()
    return [FailoverRecord(*row) for row in rows]


@dataclass(frozen=True)
class FailoverCount:
    """How many payments moved from one provider to another, for one cause."""

    from_provider: str
    to_provider: str
    cause: str
    count: int


_COUNTS = """
    SELECT from_provider, to_provider, cause, count(*) FROM payment_failovers
    WHERE created_at > now() - make_interval(secs => %(span)s)
    GROUP BY from_provider, to_provider, cause
    ORDER BY count(*) DESC, from_provider, to_provider, cause
"""


async def counts(conn: Connection, span_s: int) -> list[FailoverCount]:
    """The failovers of the last `span_s` seconds by from -> to provider and cause; the
    most frequent first."""
    rows = await (await conn.execute(_COUNTS, {"span": span_s})).fetchall()
    return [FailoverCount(source, target, cause, int(n)) for source, target, cause, n in rows]
