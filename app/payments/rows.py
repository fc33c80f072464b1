"""A payment as the runtime reads it (one row of `payments`).

Plain values, no SQLAlchemy: the tables are `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.payments.status import CAPTURABLE, CAPTURED_IN_FULL, CaptureMode, PaymentStatus
from app.provider.keys import attempt_key


@dataclass(frozen=True)
class PaymentRow:
    """One row of `payments`, as read."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    operation_id: uuid.UUID
    provider_key: str
    route: list[str]
    attempt: int
    status: str
    amount_minor: int
    currency: str
    account_id: str
    merchant_reference: str | None
    description: str | None
    metadata: dict[str, Any]
    provider_charge_id: str | None
    decline_code: str | None
    created_at: datetime
    updated_at: datetime
    amount_refunded_minor: int = 0
    capture_mode: str = CaptureMode.AUTOMATIC.value
    capture_before: datetime | None = None
    amount_captured_minor: int = 0
    # The capture or void in flight (its operation), if one is.
    modifying_operation_id: uuid.UUID | None = None

    @property
    def manual(self) -> bool:
        """Whether the payment authorizes only, its money taken by later captures."""
        return self.capture_mode == CaptureMode.MANUAL

    @property
    def taken_minor(self) -> int:
        """What the payment took: its captures' sum if manual; all of it once a one-step
        payment succeeded (refunds after that do not change what was taken)."""
        return taken_minor(self, self.status, self.amount_captured_minor)

    @property
    def amount_capturable_minor(self) -> int:
        """What captures may still take: the rest of an open authorization, else nothing."""
        if PaymentStatus(self.status) not in CAPTURABLE:
            return 0
        return self.amount_minor - self.amount_captured_minor

    @property
    def provider(self) -> str:
        """The provider of the current attempt (once final: the one holding the charge)."""
        return self.route[self.attempt]

    @property
    def next_provider(self) -> str | None:
        """The provider the payment fails over to from its current attempt, if any."""
        return self.route[self.attempt + 1] if self.attempt + 1 < len(self.route) else None

    def attempt_key(self, attempt: int | None = None) -> str:
        """The provider key of an attempt (by default the current one)."""
        return attempt_key(self.provider_key, self.attempt if attempt is None else attempt)

    def standing(self, attempt: int) -> str:
        """Where an attempt on the route stands: `failed_over` (left behind), `current`
        (being tried), `holds_outcome` (the one a final payment's outcome came from) or
        `not_tried`."""
        if attempt < self.attempt:
            return "failed_over"
        if attempt > self.attempt:
            return "not_tried"
        return "current" if self.status == PaymentStatus.PENDING else "holds_outcome"


def taken_minor(payment: PaymentRow, status: str, captured_minor: int) -> int:
    """What `payment` took once at `status` with `captured_minor` captured (see
    `PaymentRow.taken_minor`): for an outcome being recorded, before its row is written."""
    if payment.capture_mode == CaptureMode.MANUAL:
        return captured_minor
    return payment.amount_minor if PaymentStatus(status) in CAPTURED_IN_FULL else 0
