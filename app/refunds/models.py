"""The refunds table: money given back on a payment, one row per refund operation."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.refunds.rows import RefundStatus

_STATUSES = ", ".join(f"'{s.value}'" for s in RefundStatus)


class Refund(Base):
    """A refund we asked the provider for, with its own stable provider key."""

    __tablename__ = "refunds"
    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUSES})", name="status_valid"),
        CheckConstraint("amount_minor > 0", name="amount_positive"),
        # A payment's refunds, newest last: the list read and the claim's sum.
        Index(
            "ix_refunds_tenant_id_payment_id_created_at", "tenant_id", "payment_id", "created_at"
        ),
        # A day's refunds, for settlement reconciliation (as for payments).
        Index("ix_refunds_created_at_brin", "created_at", postgresql_using="brin"),
        # The operators' search by the provider's refund id, across tenants.
        Index(
            "ix_refunds_provider_refund_id",
            "provider_refund_id",
            postgresql_where=text("provider_refund_id IS NOT NULL"),
        ),
        # The operators' list, newest first, across tenants and for one (`operator_reads.py`).
        Index("ix_refunds_created", "created_at", "id"),
        Index("ix_refunds_tenant_created", "tenant_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    # No foreign keys to `payments` or `operations`: both are partitioned by day, and a key
    # to them would have to name the day too. The refund's claim writes its operation and
    # this row in one statement, reading the payment under its row lock (docs/scaling.md,
    # "Time partitions").
    payment_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), unique=True)
    # Derived from our own refund id and stored at claim time, like a payment's.
    provider_key: Mapped[str] = mapped_column(String(128), unique=True)
    # The provider's charge being refunded, copied from the payment at claim time.
    charge_id: Mapped[str] = mapped_column(String(128))
    # The provider holding the refunded charge, by name: the refund goes there and nowhere
    # else (its payment's route at the attempt its charge came from).
    provider: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    reason: Mapped[str | None] = mapped_column(String(32))
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=text("'{}'::jsonb")
    )
    provider_refund_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
