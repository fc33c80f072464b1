"""A capture or a void as its JSON answers show it: a stored row on its way out.

The shapes are `CaptureOut` and `VoidOut` (`schemas.py`). The answers of the lists, the
stored answer of a capture or void (`replies.py`) and what operators see of it are all this.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.authorizations.rows import ModificationRow, ModificationType
from app.clock import iso
from app.payments.money import format_minor_units


def modification_json(
    row: ModificationRow,
    *,
    status: str | None = None,
    provider_reference: str | None = None,
    updated_at: datetime | None = None,
) -> dict[str, Any]:
    """The capture or void as a JSON-ready dict; the keyword arguments describe an outcome
    being recorded, before the row is updated."""
    capture = row.type == ModificationType.CAPTURE
    noun = "capture" if capture else "void"
    amount = format_minor_units(row.amount_minor, row.currency)
    return {
        f"{noun}_id": str(row.id),
        "payment_id": str(row.payment_id),
        "operation_id": str(row.operation_id),
        "status": status or row.status,
        "amount" if capture else "amount_released": amount,
        "currency": row.currency,
        f"provider_{noun}_id": provider_reference or row.provider_reference,
        "created_at": iso(row.created_at),
        "updated_at": iso(updated_at or row.updated_at),
    }
