"""Capture and void requests read into their canonical commands: one path for every way in.

`POST /payments/{payment_id}/captures` and `.../void`, and the `capture_payment` and
`void_payment` commands over the broker (`app/broker/kinds.py`), all go through these
readers, so both ways refuse the same requests with the same problems, in the same order:
the body first (`422 VALIDATION_ERROR`), then the payment id, which must be a UUID (`404`),
then a capture's amount (`422`, more than zero). Nothing is read from the database here:
whether the payment is the tenant's, capturable or voidable is the claim's to say, under
the payment's lock. Nothing is stored by any of these.
"""

from __future__ import annotations

import uuid

from pydantic import ValidationError

from app.authorizations.schemas import (
    CaptureCommand,
    CaptureRequest,
    VoidCommand,
    VoidRequest,
    to_capture_command,
)
from app.errors import NotFound, ValidationFailed
from app.payments.schemas import AmountError


def read_capture_request(*, payment_id: str, data: object) -> CaptureCommand:
    """The canonical capture of payment `payment_id` (as the path names it) with body `data`
    (a parsed JSON object), or the problem refusing it."""
    try:
        body = CaptureRequest.model_validate(data)
    except ValidationError as exc:
        raise _invalid("capture", exc) from None
    parsed = _uuid_or_404(payment_id)
    try:
        return to_capture_command(body, payment_id=parsed)
    except AmountError as exc:
        raise ValidationFailed(
            "the capture request is invalid", errors=[{"field": "amount", "message": str(exc)}]
        ) from None


def read_void_request(*, payment_id: str, data: object) -> VoidCommand:
    """The canonical void of payment `payment_id` with body `data` (an empty object), or
    the problem refusing it."""
    try:
        VoidRequest.model_validate(data)
    except ValidationError as exc:
        raise _invalid("void", exc) from None
    return VoidCommand(payment_id=_uuid_or_404(payment_id))


def _uuid_or_404(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound("no such payment") from None


def _invalid(what: str, exc: ValidationError) -> ValidationFailed:
    errors = [
        {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
        for err in exc.errors()
    ]
    return ValidationFailed(f"the {what} request is invalid", errors=errors)
