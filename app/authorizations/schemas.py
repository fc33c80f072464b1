"""The capture and void requests, their canonical commands, and their OpenAPI shapes.

The JSON of a stored capture or void is built by `views.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from app.payments.money import InvalidAmount, to_minor_units
from app.payments.schemas import AmountError

# The canonical form of a capture sent without an amount: all that is capturable when it is
# claimed. A retry of it is the same request whatever is capturable by then.
THE_REST = "rest"


class CaptureRequest(BaseModel):
    """Body of `POST /payments/{id}/captures`. Unknown members are rejected; no floats."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: StrictStr | None = Field(
        default=None,
        description="Decimal string > 0 with at most the payment currency's fraction digits; "
        "absent: all that is capturable",
        examples=["5.00"],
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        max_length=32,
    )


class VoidRequest(BaseModel):
    """Body of `POST /payments/{id}/void`: an empty object."""

    model_config = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True)
class CaptureCommand:
    """A validated capture in canonical form: what the fingerprint is computed over.

    `amount_minor` is None for "the rest": the amount is resolved under the payment's lock
    when the capture is claimed, and the command keeps saying "the rest".
    """

    payment_id: uuid.UUID
    amount_minor: int | None

    def canonical(self) -> dict[str, Any]:
        amount: int | str = THE_REST if self.amount_minor is None else self.amount_minor
        return {"payment_id": str(self.payment_id), "amount_minor": amount}


@dataclass(frozen=True)
class VoidCommand:
    """A void in canonical form: which payment's hold it releases."""

    payment_id: uuid.UUID

    def canonical(self) -> dict[str, Any]:
        return {"payment_id": str(self.payment_id)}


def to_capture_command(
    request: CaptureRequest, *, payment_id: uuid.UUID, currency: str
) -> CaptureCommand:
    """Canonicalise a validated capture against its payment's currency."""
    if request.amount is None:
        return CaptureCommand(payment_id=payment_id, amount_minor=None)
    try:
        amount_minor = to_minor_units(request.amount, currency)
    except InvalidAmount as exc:
        raise AmountError(str(exc)) from None
    return CaptureCommand(payment_id=payment_id, amount_minor=amount_minor)


class CaptureOut(BaseModel):
    """The capture representation."""

    capture_id: uuid.UUID
    payment_id: uuid.UUID
    operation_id: uuid.UUID
    status: str = Field(description="PENDING, SUCCEEDED or FAILED")
    amount: str
    currency: str
    provider_capture_id: str | None = Field(description="The provider's capture id, once known")
    created_at: datetime
    updated_at: datetime


class VoidOut(BaseModel):
    """The void representation."""

    void_id: uuid.UUID
    payment_id: uuid.UUID
    operation_id: uuid.UUID
    status: str = Field(description="PENDING, SUCCEEDED or FAILED")
    amount_released: str = Field(description="What the void releases of the authorization")
    currency: str
    provider_void_id: str | None = Field(description="The provider's void id, once known")
    created_at: datetime
    updated_at: datetime


class CaptureList(BaseModel):
    """A page of captures, oldest first."""

    data: list[CaptureOut]
    has_more: bool


class VoidList(BaseModel):
    """A page of voids, oldest first."""

    data: list[VoidOut]
    has_more: bool
