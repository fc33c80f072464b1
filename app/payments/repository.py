"""All SQL on payments."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.payments.models import Payment
from app.payments.schemas import CreatePaymentCommand
from app.payments.status import PaymentStatus


async def insert_payment(
    session: AsyncSession,
    *,
    payment_id: uuid.UUID,
    tenant_id: uuid.UUID,
    operation_id: uuid.UUID,
    provider_key: str,
    command: CreatePaymentCommand,
) -> None:
    """Insert the payment, PENDING, with its derived provider key."""
    await session.execute(
        insert(Payment).values(
            id=payment_id,
            tenant_id=tenant_id,
            operation_id=operation_id,
            provider_key=provider_key,
            status=PaymentStatus.PENDING.value,
            amount_minor=command.amount_minor,
            currency=command.currency,
            account_id=command.account_id,
            merchant_reference=command.merchant_reference,
            description=command.description,
            metadata_=command.metadata,
        )
    )


async def get_for_operation(session: AsyncSession, operation_id: uuid.UUID) -> Payment:
    """The payment an operation created (every operation has exactly one)."""
    stmt = select(Payment).where(Payment.operation_id == operation_id)
    return (await session.execute(stmt)).scalar_one()


async def get(
    session: AsyncSession, *, tenant_id: uuid.UUID, payment_id: uuid.UUID
) -> Payment | None:
    """The tenant's payment by id; None for another tenant's."""
    stmt = select(Payment).where(Payment.id == payment_id, Payment.tenant_id == tenant_id)
    return (await session.execute(stmt)).scalar_one_or_none()


async def record_result(
    session: AsyncSession,
    payment_id: uuid.UUID,
    *,
    status: PaymentStatus,
    provider_charge_id: str | None,
    decline_code: str | None,
    at: datetime,
) -> Payment:
    """Write the provider's definite answer onto the payment."""
    stmt = (
        update(Payment)
        .where(Payment.id == payment_id)
        .values(
            status=status.value,
            provider_charge_id=provider_charge_id,
            decline_code=decline_code,
            updated_at=at,
        )
        .returning(Payment)
    )
    return (await session.execute(stmt)).scalar_one()
