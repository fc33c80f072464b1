"""The payment as its JSON answers show it: a stored row on its way out.

The shape is `PaymentOut` (`schemas.py`), as the OpenAPI description documents it. The
answers of `GET /payments/{id}`, the stored answer of a charge (`replies.py`), the payment
events' `data` (`driver.py`) and what operators see of it (`kind.py`) are all this one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.clock import iso
from app.payments.money import format_minor_units
from app.payments.rows import PaymentRow, taken_minor
from app.payments.status import CAPTURABLE, PaymentStatus


def payment_json(
    payment: PaymentRow,
    *,
    status: str | None = None,
    provider_charge_id: str | None = None,
    decline_code: str | None = None,
    updated_at: datetime | None = None,
    amount_captured_minor: int | None = None,
) -> dict[str, Any]:
    """The payment as a JSON-ready dict (the shape of `PaymentOut`).

    The keyword arguments describe an outcome being recorded, before the row is updated.
    """
    status = status or payment.status
    captured = taken_minor(
        payment,
        status,
        payment.amount_captured_minor if amount_captured_minor is None else amount_captured_minor,
    )
    capturable = payment.amount_minor - captured if PaymentStatus(status) in CAPTURABLE else 0
    return {
        "payment_id": str(payment.id),
        "operation_id": str(payment.operation_id),
        "status": status,
        "amount": format_minor_units(payment.amount_minor, payment.currency),
        "currency": payment.currency,
        "amount_refunded": format_minor_units(payment.amount_refunded_minor, payment.currency),
        "capture": payment.capture_mode,
        "amount_captured": format_minor_units(captured, payment.currency),
        "amount_capturable": format_minor_units(capturable, payment.currency),
        "capture_before": None if payment.capture_before is None else iso(payment.capture_before),
        "account_id": payment.account_id,
        "merchant_reference": payment.merchant_reference,
        "description": payment.description,
        "metadata": payment.metadata,
        "provider_charge_id": provider_charge_id or payment.provider_charge_id,
        "decline_code": decline_code or payment.decline_code,
        "created_at": iso(payment.created_at),
        "updated_at": iso(updated_at or payment.updated_at),
    }
