"""Payment statuses as clients see them."""

from __future__ import annotations

from enum import StrEnum


class PaymentStatus(StrEnum):
    """PENDING until the provider's answer is known; then SUCCEEDED, DECLINED or FAILED, or,
    for a payment sent with `"capture": "manual"`, AUTHORIZED.

    A SUCCEEDED payment becomes PARTIALLY_REFUNDED, then REFUNDED, as refunds succeed. An
    AUTHORIZED payment becomes PARTIALLY_CAPTURED, then CAPTURED, as captures succeed; a void
    makes it VOIDED (nothing captured) or CAPTURED (the rest released); a hold that lapses
    makes it EXPIRED (nothing captured) or CAPTURED. A CAPTURED payment is refunded as a
    SUCCEEDED one is, up to what was captured.
    """

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
    PARTIALLY_REFUNDED = "PARTIALLY_REFUNDED"
    REFUNDED = "REFUNDED"
    AUTHORIZED = "AUTHORIZED"
    PARTIALLY_CAPTURED = "PARTIALLY_CAPTURED"
    CAPTURED = "CAPTURED"
    VOIDED = "VOIDED"
    EXPIRED = "EXPIRED"


class CaptureMode(StrEnum):
    """How a payment takes its money: at once (`automatic`), or held and captured later."""

    AUTOMATIC = "automatic"
    MANUAL = "manual"


# How long a manual payment's authorization may be captured, unless the settings say
# otherwise (`PAYMENTS_CAPTURE_WINDOW_S`): 7 days, what card networks hold most authorizations.
CAPTURE_WINDOW_S = 7 * 86_400

# A refund may be asked for only while the payment has captured money left to give back.
REFUNDABLE = frozenset(
    {PaymentStatus.SUCCEEDED, PaymentStatus.PARTIALLY_REFUNDED, PaymentStatus.CAPTURED}
)
# An authorization holds money that may still be captured (or released).
CAPTURABLE = frozenset({PaymentStatus.AUTHORIZED, PaymentStatus.PARTIALLY_CAPTURED})
# What a one-step payment's success captured: all of it.
CAPTURED_IN_FULL = frozenset(
    {PaymentStatus.SUCCEEDED, PaymentStatus.PARTIALLY_REFUNDED, PaymentStatus.REFUNDED}
)
