"""The payment_modifications table: the captures and voids of manual payments."""

from __future__ import annotations

import uuid
from datetime import datetime

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
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.authorizations.rows import ModificationStatus, ModificationType
from app.db.base import Base

_TYPES = ", ".join(f"'{t.value}'" for t in ModificationType)
_STATUSES = ", ".join(f"'{s.value}'" for s in ModificationStatus)


class PaymentModification(Base):
    """A capture or a void of a payment's authorization, with its own stable provider key."""

    __tablename__ = "payment_modifications"
    __table_args__ = (
        CheckConstraint(f"type IN ({_TYPES})", name="type_valid"),
        CheckConstraint(f"status IN ({_STATUSES})", name="status_valid"),
        CheckConstraint("amount_minor >= 0", name="amount_not_negative"),
        CheckConstraint("type <> 'capture' OR amount_minor > 0", name="capture_positive"),
        # At most one capture or void of a payment in flight: the database refuses a second
        # whatever the claim's checks saw (they lock the payment first, so it never should).
        Index(
            "uq_payment_modifications_in_flight",
            "tenant_id",
            "payment_id",
            unique=True,
            postgresql_where=text("status = 'PENDING'"),
        ),
        # A payment's captures and voids, oldest first.
        Index(
            "ix_payment_modifications_tenant_payment_created",
            "tenant_id",
            "payment_id",
            "created_at",
        ),
        # A day's captures, for settlement reconciliation (as for payments).
        Index("ix_payment_modifications_created_at_brin", "created_at", postgresql_using="brin"),
        # The operators' search by the provider's capture or void id, across tenants.
        Index(
            "ix_payment_modifications_provider_reference",
            "provider_reference",
            postgresql_where=text("provider_reference IS NOT NULL"),
        ),
        # The operators' list, newest first, across tenants and for one.
        Index("ix_payment_modifications_created", "created_at", "id"),
        Index("ix_payment_modifications_tenant_created", "tenant_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    # No foreign keys to `payments` or `operations`: both are partitioned by day, and a key
    # to them would have to name the day too. The claim writes its operation and this row
    # in one statement, reading the payment under its row lock (docs/scaling.md, "Time
    # partitions").
    payment_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), unique=True)
    type: Mapped[str] = mapped_column(String(16))
    # Derived from the modification's own id and stored at claim time (`capture-<uuid>`,
    # `void-<uuid>`); every call for it, first or recovery, sends it.
    provider_key: Mapped[str] = mapped_column(String(128), unique=True)
    # The authorization (the provider's charge) it acts on, and the provider holding it.
    charge_id: Mapped[str] = mapped_column(String(128))
    provider: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    provider_reference: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
