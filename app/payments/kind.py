"""The payment as an operation kind: `create_payment`, registered in `app/composition.py`.

Its driver (`driver.py`) sends the charge, looks it up, loads payments and records their
outcomes with their stored replies (`replies.py`) and events; operators see the charge the
provider holds under the payment's derived key.
"""

from __future__ import annotations

import uuid
from typing import Any

from app.db.database import Connection
from app.operations.kinds import Described, DriverParts, OperationKind
from app.operations.models import OperationName
from app.operations.values import OperationRow
from app.payments import repository as payments
from app.payments.driver import ChargeDriver
from app.payments.views import payment_json
from app.provider.client import Charge, ProviderClient


def links(payment_id: uuid.UUID) -> dict[str, str]:
    """The ids a problem about a payment's operation shows."""
    return {"payment_id": str(payment_id)}


def _links(op: OperationRow) -> dict[str, str]:
    return links(op.payment_id)


def _build_driver(parts: DriverParts) -> ChargeDriver:
    return ChargeDriver(
        db=parts.db, provider=parts.provider, lease_s=parts.lease_s, failpoints=parts.failpoints
    )


async def _find_charge(provider: ProviderClient, provider_key: str) -> Charge | None:
    return await provider.find_charge(provider_key)


def _show_charge(charge: Charge) -> dict[str, Any]:
    return {
        "charge_id": charge.charge_id,
        "status": charge.status,
        "decline_code": charge.decline_code,
    }


async def _describe(conn: Connection, operation_id: uuid.UUID) -> Described | None:
    try:
        payment = await payments.get_for_operation(conn, operation_id)
    except LookupError:
        return None
    return Described("payment", payment_json(payment), payment.provider_key)


PAYMENT: OperationKind[ChargeDriver] = OperationKind(
    name=OperationName.CREATE_PAYMENT,
    noun="payment",
    links=_links,
    build_driver=_build_driver,
    record_name="charge",
    find_at_provider=_find_charge,
    took_effect=lambda charge: charge.status == "succeeded",
    show=_show_charge,
    describe=_describe,
)
