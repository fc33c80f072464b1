"""A refund request read into its canonical command: the one path for every way in.

`POST /payments/{payment_id}/refunds` and a `create_refund` command over the broker
(`app/broker/`) both go through `read_refund_request`, so both refuse the same requests with
the same problems, in the same order: the body first (`422 VALIDATION_ERROR`), then the
payment, which must be the tenant's (`404`, never `403`), then the amount against the
payment's currency (`422`). Nothing is stored by any of these.
"""

from __future__ import annotations

import uuid

from pydantic import ValidationError

from app.db.database import Database
from app.errors import NotFound, ValidationFailed
from app.payments import repository as payments
from app.payments.schemas import AmountError, invalid_request
from app.refunds.schemas import CreateRefundCommand, CreateRefundRequest, to_command


async def read_refund_request(
    db: Database, *, tenant_id: uuid.UUID, payment_id: str, data: object
) -> CreateRefundCommand:
    """The canonical command for a refund of the tenant's payment `payment_id` (as the path
    names it) with body `data` (a parsed JSON object), or the problem refusing it."""
    try:
        body = CreateRefundRequest.model_validate(data)
    except ValidationError as exc:
        raise invalid_request("refund", exc) from None
    try:
        parsed = uuid.UUID(payment_id)
    except ValueError:
        raise NotFound("no such payment") from None
    # The canonical command is in the payment's currency: 404 for no such payment.
    async with db.connection() as conn:
        payment = await payments.get(conn, tenant_id=tenant_id, payment_id=parsed)
    if payment is None:
        raise NotFound("no such payment")
    try:
        return to_command(body, payment_id=parsed, currency=payment.currency)
    except AmountError as exc:
        raise ValidationFailed(
            "the refund request is invalid", errors=[{"field": "amount", "message": str(exc)}]
        ) from None
