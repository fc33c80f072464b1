"""The capture and void requests, their canonical commands, and their OpenAPI shapes.

The JSON of a stored capture or void is built by `views.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
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
    """A validated capture, and its canonical form: what the fingerprint is computed over.

    `amount` is the decimal string as sent, None for "the rest". Its minor units need the
    payment's currency, which the claim reads anyway (under the payment's lock): the kind
    converts it there, so the request reads nothing before the claim. The canonical form is
    the amount's value ("4.00" and "4.0" are one request), or "the rest": a capture of the
    rest is resolved when it is claimed, and the command keeps saying "the rest".
    """

    payment_id: uuid.UUID
    amount: str | None

    def canonical(self) -> dict[str, Any]:
        return {"payment_id": str(self.payment_id), "amount": canonical_amount(self.amount)}

    def amount_minor(self, currency: str) -> int | None:
        """The amount in `currency`'s minor units (None: the rest); raises `AmountError`
        when it does not fit the currency."""
        if self.amount is None:
            return None
        try:
            return to_minor_units(self.amount, currency)
        except InvalidAmount as exc:
            raise AmountError(str(exc)) from None


def canonical_amount(amount: str | None) -> str:
    """A decimal amount's value without trailing zeros ("10.50" -> "10.5", "10.00" -> "10"),
    or "rest"."""
    if amount is None:
        return THE_REST
    return format(Decimal(amount).normalize(), "f")


@dataclass(frozen=True)
class VoidCommand:
    """A void in canonical form: which payment's hold it releases."""

    payment_id: uuid.UUID

    def canonical(self) -> dict[str, Any]:
        return {"payment_id": str(self.payment_id)}


def to_capture_command(request: CaptureRequest, *, payment_id: uuid.UUID) -> CaptureCommand:
    """The capture as a command; its amount must be more than zero (its fraction digits are
    checked against the payment's currency when it is claimed)."""
    if request.amount is not None and Decimal(request.amount) == 0:
        raise AmountError("amount must be greater than zero")
    return CaptureCommand(payment_id=payment_id, amount=request.amount)


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
