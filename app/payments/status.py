"""Payment statuses as clients see them."""

from __future__ import annotations

from enum import StrEnum


class PaymentStatus(StrEnum):
    """PENDING until the provider's answer is known; then SUCCEEDED, DECLINED or FAILED.

    A SUCCEEDED payment becomes PARTIALLY_REFUNDED, then REFUNDED, as refunds succeed.
    """

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
    PARTIALLY_REFUNDED = "PARTIALLY_REFUNDED"
    REFUNDED = "REFUNDED"


# A refund may be asked for only while the payment has money left to give back.
REFUNDABLE = frozenset({PaymentStatus.SUCCEEDED, PaymentStatus.PARTIALLY_REFUNDED})
