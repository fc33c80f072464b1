"""Payment statuses as clients see them."""

from __future__ import annotations

from enum import StrEnum


class PaymentStatus(StrEnum):
    """PENDING until the provider's answer is known; then one of the final three."""

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
