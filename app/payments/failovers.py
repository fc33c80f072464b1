"""A payment's failovers, as facts: written with the transition, read by operators.

A failover moves a payment to the next provider on its route (`app/payments/driver.py`
decides when, `app/payments/causes.py` names why). Its fenced statement writes three things
at once: the operation's transition (audited, with the reason in words), the payment's next
attempt, and a `payment_failovers` row (the same facts in columns: from where, to where,
why, the decline code or the send's error). The row exists exactly when the transition
does, and names it (`transition_id`), so a timeline can show a transition's failover.

Operators read them three ways: the dashboard counts a window's by from -> to and cause
(`counts`, through the table's `created_at` index); a payment's page and the admin API say
why each attempt was left behind (`of_payment`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.clock import iso
from app.db.database import Connection
from app.payments.causes import CIRCUIT_OPEN, DECLINED, NOT_PROCESSED

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
