"""A capture or a void as the runtime reads it (one row of `payment_modifications`).

Plain values, no SQLAlchemy: the table is `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class ModificationType(StrEnum):
    """What a modification does to its authorization."""

    CAPTURE = "capture"
    VOID = "void"


class ModificationStatus(StrEnum):
    """PENDING until the provider's answer is known (in flight: no other modification of the
    payment may be claimed meanwhile), then SUCCEEDED or FAILED."""

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class ModificationRow:
    """One row of `payment_modifications`, as read."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    payment_id: uuid.UUID
    operation_id: uuid.UUID
    type: str
    provider_key: str
    charge_id: str
    provider: str
    status: str
    # A capture's amount; a void's: what it releases (the payment's capturable amount when
    # the void was claimed, which nothing can change while the void is in flight).
    amount_minor: int
    currency: str
    # The provider's capture or void id, once it made it.
    provider_reference: str | None
    created_at: datetime
    updated_at: datetime
