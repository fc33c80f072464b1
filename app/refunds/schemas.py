"""The create-refund request, its canonical command, and the refund's OpenAPI shapes.

The JSON of a stored refund is built by `views.py` (the shape of `RefundOut`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from app.payments.money import InvalidAmount, to_minor_units
from app.payments.schemas import (
    MAX_METADATA_PAIRS,
    AmountError,
    MetadataKey,
    MetadataValue,
    check_metadata,
)
from app.refunds.rows import RefundReason


class CreateRefundRequest(BaseModel):
    """Body of `POST /payments/{id}/refunds`. Unknown members are rejected; no floats."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: StrictStr = Field(
        description="Decimal string > 0 with at most the payment currency's fraction digits",
        examples=["5.00"],
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        max_length=32,
    )
    reason: RefundReason | None = Field(
        default=None, description="requested_by_customer, duplicate or fraudulent"
    )
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None, description=f"Up to {MAX_METADATA_PAIRS} string pairs"
    )

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, value: Any) -> Any:
        # Strict mode takes no strings for an enum; the wire form is the enum's value.
        if isinstance(value, str):
            try:
                return RefundReason(value)
            except ValueError:
                allowed = ", ".join(r.value for r in RefundReason)
                raise ValueError(f"must be one of {allowed}") from None
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


@dataclass(frozen=True)
class CreateRefundCommand:
    """A validated refund request in canonical form: what the fingerprint is computed over.

    The amount is in the payment's minor units, so the payment is part of the command: the
    same key for a refund of another payment is another request.
    """

    payment_id: uuid.UUID
    amount_minor: int
    currency: str
    reason: str | None
    metadata: dict[str, str] = field(default_factory=dict)

    def canonical(self) -> dict[str, Any]:
        return {
            "payment_id": str(self.payment_id),
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "reason": self.reason,
            "metadata": dict(sorted(self.metadata.items())),
        }


def to_command(
    request: CreateRefundRequest, *, payment_id: uuid.UUID, currency: str
) -> CreateRefundCommand:
    """Canonicalise a validated request against its payment's currency."""
    try:
        amount_minor = to_minor_units(request.amount, currency)
    except InvalidAmount as exc:
        raise AmountError(str(exc)) from None
    return CreateRefundCommand(
        payment_id=payment_id,
        amount_minor=amount_minor,
        currency=currency,
        reason=None if request.reason is None else request.reason.value,
        metadata=dict(request.metadata or {}),
    )


class RefundOut(BaseModel):
    """The refund representation."""

    refund_id: uuid.UUID
    payment_id: uuid.UUID
    operation_id: uuid.UUID
    status: str = Field(description="PENDING, SUCCEEDED or FAILED")
    amount: str
    currency: str
    reason: str | None
    metadata: dict[str, str]
    provider_refund_id: str | None = Field(description="The provider's refund id, once known")
    created_at: datetime
    updated_at: datetime


class RefundList(BaseModel):
    """A page of refunds, oldest first."""

    data: list[RefundOut]
    has_more: bool
