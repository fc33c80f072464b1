"""The refund as its JSON answers show it: a stored row on its way out.

The shape is `RefundOut` (`schemas.py`), as the OpenAPI description documents it. The
answers of `GET /refunds/{id}` and the refund lists, the stored answer of a refund
(`replies.py`), the refund events' `data` (`driver.py`) and what operators see of it
(`kind.py`) are all this one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.clock import iso
from app.payments.money import format_minor_units
from app.refunds.rows import RefundRow


def refund_json(
    refund: RefundRow,
    *,
    status: str | None = None,
    provider_refund_id: str | None = None,
    updated_at: datetime | None = None,
) -> dict[str, Any]:
    """The refund as a JSON-ready dict (the shape of `RefundOut`).

    The keyword arguments describe an outcome being recorded, before the row is updated.
    """
    return {
        "refund_id": str(refund.id),
        "payment_id": str(refund.payment_id),
        "operation_id": str(refund.operation_id),
        "status": status or refund.status,
        "amount": format_minor_units(refund.amount_minor, refund.currency),
        "currency": refund.currency,
        "reason": refund.reason,
        "metadata": refund.metadata,
        "provider_refund_id": provider_refund_id or refund.provider_refund_id,
        "created_at": iso(refund.created_at),
        "updated_at": iso(updated_at or refund.updated_at),
    }
