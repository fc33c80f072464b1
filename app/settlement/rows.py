"""Settlement's records as the runtime reads them: what a record is, an item's kind and
state, an item and its changes.

Plain values, no SQLAlchemy: the tables are `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any


class RecordType(StrEnum):
    """What a provider record is: a charge (our payment; a manual payment's is an
    authorization), a refund (our refund) or a capture of an authorization (our capture)."""

    CHARGE = "charge"
    REFUND = "refund"
    CAPTURE = "capture"


class ItemKind(StrEnum):
    """How our record and the provider's differ."""

    # We say it took effect; the provider has nothing under its key.
    MISSING = "missing"
    # The provider made it under one of our keys; we have no row, or say it did not happen:
    # among them a charge under the key of an attempt a payment failed over from while its
    # outcome came from another attempt (a second charge), and any record under a key of ours
    # at a provider that key was never sent to.
    ORPHAN = "orphan"
    AMOUNT_MISMATCH = "amount_mismatch"
    CURRENCY_MISMATCH = "currency_mismatch"
    # Declined against succeeded, or a different amount refunded of a charge.
    STATUS_MISMATCH = "status_mismatch"
    # Both agree, but the provider has not settled it yet (inside the settlement lag).
    EXPECTED = "expected"


class ItemState(StrEnum):
    """open -> auto_resolved (a later run found no difference) / resolved (an operator: the
    difference is explained or fixed) / dismissed (an operator: it was never a real one)."""

    OPEN = "open"
    AUTO_RESOLVED = "auto_resolved"
    RESOLVED = "resolved"
    DISMISSED = "dismissed"


@dataclass(frozen=True)
class ItemRow:
    """One discrepancy (a row of `reconciliation_items`), as read."""

    id: uuid.UUID
    day: date
    record_type: str
    provider: str
    provider_key: str
    kind: str
    state: str
    tenant_id: uuid.UUID | None
    operation_id: uuid.UUID | None
    payment_id: uuid.UUID | None
    refund_id: uuid.UUID | None
    ours: dict[str, Any] | None
    theirs: dict[str, Any] | None
    detail: str
    first_seen_at: datetime
    last_seen_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resolution_reason: str | None


@dataclass(frozen=True)
class ChangeRow:
    """One change of a discrepancy's state (a row of `reconciliation_item_changes`)."""

    from_state: str | None
    to_state: str
    actor: str
    reason: str | None
    at: datetime
