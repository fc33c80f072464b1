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
from app.operations.values import OperationName, OperationRow
from app.payments import attempts, failovers
from app.payments import repository as payments
from app.payments.attempts import ChargeAt
from app.payments.driver import ChargeDriver
from app.payments.rows import PaymentRow
from app.payments.views import payment_json
from app.provider.registry import Providers


def links(payment_id: uuid.UUID) -> dict[str, str]:
    """The ids a problem about a payment's operation shows."""
    return {"payment_id": str(payment_id)}


def _links(op: OperationRow) -> dict[str, str]:
    return links(op.payment_id)


def _build_driver(parts: DriverParts) -> ChargeDriver:
    return ChargeDriver(
        db=parts.db,
        providers=parts.providers,
        routing=parts.routing,
        lease_s=parts.lease_s,
        failpoints=parts.failpoints,
        on_failover=parts.on_failover,
    )


async def _find_charge(providers: Providers, payment: PaymentRow) -> ChargeAt | None:
    return await attempts.look_up(providers, payment)


def _show_charge(found: ChargeAt) -> dict[str, Any]:
    return {
        "charge_id": found.charge.charge_id,
        "status": found.charge.status,
        "decline_code": found.charge.decline_code,
        "provider": found.provider,
        "attempt": found.attempt,
    }


async def _describe(conn: Connection, operation_id: uuid.UUID) -> Described | None:
    try:
        payment = await payments.get_for_operation(conn, operation_id)
    except LookupError:
        return None

    # Operators see the route too: each attempt's provider and key, where it stands, and
    # for one left behind, its failover (never in payment_json: tenants' answers are stored
    # and replayed byte for byte).
    moved = await failovers.of_payment(conn, payment.tenant_id, payment.id)
    left = {failover.from_attempt: failover.json() for failover in moved}
    attempts_shown = [
        {
            "attempt": n,
            "provider": name,
            "provider_key": payment.attempt_key(n),
            "state": payment.standing(n),
            "failover": left.get(n),
        }
        for n, name in enumerate(payment.route)
    ]
    body = payment_json(payment) | {
        "route": list(payment.route),
        "attempt": payment.attempt,
        "attempts": attempts_shown,
    }
    return Described("payment", body, payment)


PAYMENT: OperationKind[ChargeDriver] = OperationKind(
    name=OperationName.CREATE_PAYMENT,
    noun="payment",
    links=_links,
    build_driver=_build_driver,
    record_name="charge",
    find_at_provider=_find_charge,
    took_effect=lambda found: found.succeeded,
    show=_show_charge,
    describe=_describe,
)
