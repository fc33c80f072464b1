"""A refund's refusals, as problem errors (`app/errors.py` renders them).

The refund's claim (`service.py`) raises them with the payment's row locked; the
transaction rolls back, so nothing is stored under the key and nothing is sent:

409 PAYMENT_NOT_REFUNDABLE    the payment is not SUCCEEDED, PARTIALLY_REFUNDED or CAPTURED
422 REFUND_EXCEEDS_PAYMENT    succeeded and in-flight refunds would pass the payment's amount
"""

from __future__ import annotations

from app.errors import ProblemError


class PaymentNotRefundable(ProblemError):
    status, code, title = 409, "PAYMENT_NOT_REFUNDABLE", "Payment cannot be refunded"


class RefundExceedsPayment(ProblemError):
    status, code, title = 422, "REFUND_EXCEEDS_PAYMENT", "Refund exceeds the payment"
