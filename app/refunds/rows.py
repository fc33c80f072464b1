"""A refund as the runtime reads it, and the values of its status and reason.

Plain values, no SQLAlchemy: the tables are `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class RefundStatus(StrEnum):
    """PENDING until the provider's answer is known; then SUCCEEDED or FAILED."""

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class RefundReason(StrEnum):
    """Why the merchant gives the money back."""

    REQUESTED_BY_CUSTOMER = "requested_by_customer"
    DUPLICATE = "duplicate"
    FRAUDULENT = "fraudulent"


@dataclass(frozen=True)
class RefundRow:
    """One row of `refunds`, as read."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    payment_id: uuid.UUID
    operation_id: uuid.UUID
    provider_key: str
    charge_id: str
    # The provider holding the refunded charge, by name (`app/provider/registry.py`).
    provider: str
    status: str
    amount_minor: int
    currency: str
    reason: str | None
    metadata: dict[str, Any]
    provider_refund_id: str | None
    created_at: datetime
    updated_at: datetime
