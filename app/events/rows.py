"""The kinds of event the outbox records (`events.event_type`).

Plain values, without SQLAlchemy: the tables are declared in `models.py`, which only the
migrations and the schema's tests load; the runtime reads its rows through these.
"""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    """Every event type the service emits."""

    PAYMENT_SUCCEEDED = "payment.succeeded"
    PAYMENT_DECLINED = "payment.declined"
    PAYMENT_FAILED = "payment.failed"
    PAYMENT_NEEDS_ATTENTION = "payment.needs_attention"
    REFUND_SUCCEEDED = "refund.succeeded"
    REFUND_FAILED = "refund.failed"
