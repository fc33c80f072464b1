"""What operators can act on, by operation name: the payment and the refund.

Built by the composition root from each kind's driver and reconciler, so the operators' code
(`app/admin/`) names no business table. For each kind: how to describe its business object,
how to find the provider's record under its derived key, and what that record means.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from app.admin.subjects import Described, Subject
from app.db.database import Database
from app.operations.models import OperationName
from app.payments import repository as payments
from app.payments.charging import ChargeDriver
from app.payments.schemas import payment_json
from app.provider.client import Charge, ProviderClient, ProviderRefund
from app.recovery.reconcile import Reconciler
from app.refunds import repository as refunds
from app.refunds.driver import RefundDriver
from app.refunds.schemas import refund_json


def operator_subjects(
    *,
    db: Database,
    provider: ProviderClient,
    charges: tuple[ChargeDriver, Reconciler[Any, Any]],
    refunds_: tuple[RefundDriver, Reconciler[Any, Any]],
) -> Mapping[str, Subject]:
    """One `Subject` per operation name."""

    async def describe_payment(operation_id: uuid.UUID) -> Described | None:
        async with db.connection() as conn:
            try:
                payment = await payments.get_for_operation(conn, operation_id)
            except LookupError:
                return None
        return Described("payment", payment_json(payment), payment.provider_key)

    async def describe_refund(operation_id: uuid.UUID) -> Described | None:
        async with db.connection() as conn:
            try:
                refund = await refunds.get_for_operation(conn, operation_id)
            except LookupError:
                return None
        return Described("refund", refund_json(refund), refund.provider_key)

    return {
        OperationName.CREATE_PAYMENT.value: Subject(
            describe=describe_payment,
            find_at_provider=provider.find_charge,
            driver=charges[0],
            reconciler=charges[1],
            record_name="charge",
            took_effect=lambda charge: charge.status == "succeeded",
            show=_show_charge,
        ),
        OperationName.CREATE_REFUND.value: Subject(
            describe=describe_refund,
            find_at_provider=provider.find_refund,
            driver=refunds_[0],
            reconciler=refunds_[1],
            record_name="refund",
            # The provider keeps only refunds it made.
            took_effect=lambda refund: True,
            show=_show_refund,
        ),
    }


def _show_charge(charge: Charge) -> dict[str, Any]:
    return {
        "charge_id": charge.charge_id,
        "status": charge.status,
        "decline_code": charge.decline_code,
    }


def _show_refund(refund: ProviderRefund) -> dict[str, Any]:
    return {
        "refund_id": refund.refund_id,
        "status": "succeeded",
        "charge_id": refund.charge_id,
        "amount_minor": refund.amount_minor,
    }
