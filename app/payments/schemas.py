"""The create-payment request, its canonical command, and the payment's OpenAPI shape.

`read_payment_request` is the one way a body becomes a command: `POST /payments` and a
`create_payment` command over the broker (`app/broker/`) both go through it, so both refuse
the same bodies with the same `422`. The JSON of a stored payment is built by `views.py`
(the shape of `PaymentOut`).
"""

from __future__ import annotations

import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from app.errors import ValidationFailed
from app.payments.money import InvalidAmount, UnknownCurrency, currency_exponent, to_minor_units
from app.payments.status import CaptureMode

MAX_METADATA_PAIRS = 20


def _reject_controls(value: str, *, allow_whitespace: bool = False) -> str:
    # NUL cannot be stored by PostgreSQL at all, and other control characters in ids and
    # references are almost always a client bug; refuse them with a clear message.
    allowed = {"\t", "\n", "\r"} if allow_whitespace else set()
    for ch in value:
        if ch not in allowed and unicodedata.category(ch) in ("Cc", "Cs"):
            raise ValueError(f"must not contain control characters (found U+{ord(ch):04X})")
    return value


MetadataKey = Annotated[StrictStr, Field(min_length=1, max_length=40)]
MetadataValue = Annotated[StrictStr, Field(max_length=500)]


class CreatePaymentRequest(BaseModel):
    """Body of `POST /payments`. Unknown members are rejected; money is never a float."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: StrictStr = Field(
        description="Decimal string > 0 with at most the currency's fraction digits "
        "(a JSON number is refused)",
        examples=["10.00"],
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        max_length=32,
    )
    currency: StrictStr = Field(
        description="ISO 4217 alphabetic code with a minor unit, any case",
        examples=["EUR"],
        pattern=r"^[A-Za-z]{3}$",
    )
    account_id: StrictStr = Field(
        min_length=1, max_length=64, description="The payer's account at the provider"
    )
    merchant_reference: StrictStr | None = Field(default=None, max_length=128)
    description: StrictStr | None = Field(default=None, max_length=500)
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None, description=f"Up to {MAX_METADATA_PAIRS} string pairs"
    )
    capture: CaptureMode | None = Field(
        default=None,
        description="`automatic` (the default): charged at once; `manual`: authorized only, "
        "the money taken later by `POST /payments/{id}/captures` or released by "
        "`POST /payments/{id}/void`",
    )

    @field_validator("capture", mode="before")
    @classmethod
    def _capture(cls, value: Any) -> Any:
        # Strict mode takes no strings for an enum; the wire form is the enum's value.
        if isinstance(value, str):
            try:
                return CaptureMode(value)
            except ValueError:
                allowed = ", ".join(m.value for m in CaptureMode)
                raise ValueError(f"must be one of {allowed}") from None
        return value

    @field_validator("currency")
    @classmethod
    def _known_currency(cls, value: str) -> str:
        try:
            currency_exponent(value)
        except UnknownCurrency as exc:
            raise ValueError(str(exc)) from None
        return value.upper()

    @field_validator("account_id", "merchant_reference")
    @classmethod
    def _no_controls(cls, value: str | None) -> str | None:
        return None if value is None else _reject_controls(value)

    @field_validator("description")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _reject_controls(value, allow_whitespace=True)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


def check_metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    """The metadata rules every object shares: pair count, no control characters."""
    if value is None:
        return None
    if len(value) > MAX_METADATA_PAIRS:
        raise ValueError(f"may hold at most {MAX_METADATA_PAIRS} pairs")
    for key, item in value.items():
        _reject_controls(key)
        _reject_controls(item, allow_whitespace=True)
    return value


@dataclass(frozen=True)
class CreatePaymentCommand:
    """A validated request in canonical form: what the fingerprint is computed over."""

    amount_minor: int
    currency: str
    account_id: str
    merchant_reference: str | None
    description: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    capture: CaptureMode = CaptureMode.AUTOMATIC

    def canonical(self) -> dict[str, Any]:
        canonical: dict[str, Any] = {
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "account_id": self.account_id,
            "merchant_reference": self.merchant_reference,
            "description": self.description,
            "metadata": dict(sorted(self.metadata.items())),
        }
        # The default is left out, so every key sent before capture could be chosen keeps
        # its fingerprint; "manual" is another request than the same payment charged at once.
        if self.capture is CaptureMode.MANUAL:
            canonical["capture"] = self.capture.value
        return canonical


class AmountError(ValueError):
    """The amount does not fit the currency (carried to a VALIDATION_ERROR on `amount`)."""


def to_command(request: CreatePaymentRequest) -> CreatePaymentCommand:
    """Canonicalise a validated request: minor units, upper-case currency, defaults applied."""
    try:
        amount_minor = to_minor_units(request.amount, request.currency)
    except InvalidAmount as exc:
        raise AmountError(str(exc)) from None
    return CreatePaymentCommand(
        amount_minor=amount_minor,
        currency=request.currency,
        account_id=request.account_id,
        merchant_reference=request.merchant_reference,
        description=request.description,
        metadata=dict(request.metadata or {}),
        capture=request.capture or CaptureMode.AUTOMATIC,
    )


def read_payment_request(data: object) -> CreatePaymentCommand:
    """The canonical command for a create-payment body (a parsed JSON object), or
    `ValidationFailed` naming each failing field."""
    try:
        return to_command(CreatePaymentRequest.model_validate(data))
    except ValidationError as exc:
        raise invalid_request("payment", exc) from None
    except AmountError as exc:
        raise ValidationFailed(
            "the payment request is invalid", errors=[{"field": "amount", "message": str(exc)}]
        ) from None


def invalid_request(noun: str, exc: ValidationError) -> ValidationFailed:
    """The `422 VALIDATION_ERROR` for a body its model refused: each failing field."""
    errors = [
        {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
        for err in exc.errors()
    ]
    return ValidationFailed(f"the {noun} request is invalid", errors=errors)


class PaymentOut(BaseModel):
    """The payment representation."""

    payment_id: uuid.UUID
    operation_id: uuid.UUID
    status: str = Field(
        description="PENDING, SUCCEEDED, DECLINED, FAILED, PARTIALLY_REFUNDED or REFUNDED; for "
        "a manual capture AUTHORIZED, PARTIALLY_CAPTURED, CAPTURED, VOIDED or EXPIRED"
    )
    amount: str
    currency: str
    account_id: str
    merchant_reference: str | None
    description: str | None
    metadata: dict[str, str]
    amount_refunded: str = Field(description="The sum of the payment's succeeded refunds")
    capture: str = Field(description="`automatic` or `manual`")
    amount_captured: str = Field(
        description="What the payment took: its amount once a one-step payment succeeded, "
        "the sum of its succeeded captures for a manual one"
    )
    amount_capturable: str = Field(
        description="What captures may still take (zero unless AUTHORIZED or PARTIALLY_CAPTURED)"
    )
    capture_before: datetime | None = Field(
        description="When a manual payment's hold lapses (null for automatic capture)"
    )
    provider_charge_id: str | None = Field(description="The provider's charge id, once known")
    decline_code: str | None = Field(description="The provider's decline code, if declined")
    created_at: datetime
    updated_at: datetime
