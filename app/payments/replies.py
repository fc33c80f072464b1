"""The answers stored for a payment's final outcomes (pure; rendering is `idempotency/replies.py`).

The payment's kind (`kind.py`) renders them before the statement that records the outcome,
which stores them, so the first answer and every replay are the same bytes. Nothing here
touches the database.
"""

from __future__ import annotations

import uuid
from typing import Any

from app.errors import PROBLEM_JSON, dump_json, problem_body
from app.idempotency.replies import JSON, stored_reply
from app.operations.values import StoredResponse
from app.payments.rows import PaymentRow
from app.provider.client import Charge


def charged(
    payment: PaymentRow, charge: Charge, *, operation_id: uuid.UUID, body: dict[str, Any]
) -> StoredResponse:
    """The answer stored for a charge the provider processed: 201 with `body` (the payment
    as the outcome leaves it: `payment_json` with the charge; succeeded or authorized), or
    402 if declined."""
    if charge.status != "declined":
        return stored_reply(201, JSON, dump_json(body), {"location": payment_location(payment.id)})
    code = charge.decline_code or "declined"
    problem = problem_body(
        status=402,
        code=code,
        title="Payment declined",
        detail=f"the provider declined the payment ({code})",
        payment_id=str(payment.id),
        operation_id=str(operation_id),
    )
    return stored_reply(402, PROBLEM_JSON, dump_json(problem), {})


def rejected(payment: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    """The answer stored when the provider refused the request as invalid: 502."""
    text = f"the provider rejected the request; nothing was charged: {detail}"
    return _failed(payment, text, operation_id=operation_id)


def not_charged(payment: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    """The answer stored when an operator resolved the payment as not charged: 502.

    The same answer as every FAILED payment (`PROVIDER_REJECTED`: final, nothing charged), so
    clients need no new case; the detail says how it came about.
    """
    return _failed(payment, f"nothing was charged: {detail}", operation_id=operation_id)


def _failed(payment: PaymentRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    problem = problem_body(
        status=502,
        code="PROVIDER_REJECTED",
        title="Provider rejected the payment",
        detail=detail,
        payment_id=str(payment.id),
        operation_id=str(operation_id),
    )
    return stored_reply(502, PROBLEM_JSON, dump_json(problem), {})


def payment_location(payment_id: uuid.UUID) -> str:
    return f"/payments/{payment_id}"
