"""The kinds of event the outbox records (`events.event_type`).

Plain values, no SQLAlchemy: the tables are `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    """Every event type the service emits."""

    PAYMENT_SUCCEEDED = "payment.succeeded"
    PAYMENT_DECLINED = "payment.declined"
    PAYMENT_FAILED = "payment.failed"
    PAYMENT_NEEDS_ATTENTION = "payment.needs_attention"
    PAYMENT_AUTHORIZED = "payment.authorized"
    PAYMENT_CAPTURED = "payment.captured"
    PAYMENT_CAPTURE_FAILED = "payment.capture_failed"
    PAYMENT_VOIDED = "payment.voided"
    PAYMENT_VOID_FAILED = "payment.void_failed"
    PAYMENT_EXPIRED = "payment.expired"
    REFUND_SUCCEEDED = "refund.succeeded"
    REFUND_FAILED = "refund.failed"
