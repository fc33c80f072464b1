"""The refund as an operation kind: `create_refund`, registered in `app/composition.py`.

Its driver (`driver.py`) sends the refund, looks it up, loads refunds and records their
outcomes with their stored replies (`replies.py`) and events; operators see the refund the
provider holds under the refund's derived key.
"""

from __future__ import annotations

import uuid
from typing import Any

from app.db.database import Connection
from app.operations.kinds import Described, DriverParts, OperationKind
from app.operations.values import OperationName, OperationRow
from app.provider.client import ProviderRefund
from app.provider.registry import Providers
from app.refunds import repository as refunds
from app.refunds.driver import RefundDriver
from app.refunds.rows import RefundRow
from app.refunds.views import refund_json


def links(payment_id: uuid.UUID, refund_id: uuid.UUID) -> dict[str, str]:
    """The ids a problem about a refund's operation shows: the refunded payment's, its own."""
    return {"payment_id": str(payment_id), "refund_id": str(refund_id)}


def _links(op: OperationRow) -> dict[str, str]:
    assert op.refund_id is not None, "a refund's operation links its refund"
    return links(op.payment_id, op.refund_id)


def _build_driver(parts: DriverParts) -> RefundDriver:
    return RefundDriver(
        db=parts.db, providers=parts.providers, lease_s=parts.lease_s, failpoints=parts.failpoints
    )


async def _find_refund(providers: Providers, refund: RefundRow) -> ProviderRefund | None:
    return await providers[refund.provider].find_refund(refund.provider_key)


def _show_refund(refund: ProviderRefund) -> dict[str, Any]:
    return {
        "refund_id": refund.refund_id,
        "status": "succeeded",
        "charge_id": refund.charge_id,
        "amount_minor": refund.amount_minor,
    }


async def _describe(conn: Connection, operation_id: uuid.UUID) -> Described | None:
    try:
        refund = await refunds.get_for_operation(conn, operation_id)
    except LookupError:
        return None
    return Described("refund", refund_json(refund), refund)


REFUND: OperationKind[RefundDriver] = OperationKind(
    name=OperationName.CREATE_REFUND,
    noun="refund",
    links=_links,
    build_driver=_build_driver,
    record_name="refund",
    find_at_provider=_find_refund,
    # The provider keeps only refunds it made.
    took_effect=lambda refund: True,
    show=_show_refund,
    describe=_describe,
)
