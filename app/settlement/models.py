"""The settlement tables: what the provider settled, the differences found, the days run.

- `settlement_lines`: one row per charge, capture or refund a provider's settlement report
  listed, by provider and the provider's id of it, with its fee, net amount and payout (the
  fees and net amounts of each payment; a manual payment's are its captures').
- `reconciliation_items`: the discrepancy queue, one row per difference between our record
  and the provider's (the table keeps the name it was made with),
  unique by (record type, provider, provider key, kind), so running a day again finds the
  same row instead of adding one. Its changes are audited in `reconciliation_item_changes`.
- `settlement_days`: one row per creation day settled: who runs it (a lease and a fence,
  as every claimed row has them: one run at a time, a run whose lease was taken over
  writes nothing), when it last finished, and what it found.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.settlement.rows import ItemKind, ItemState, RecordType


def _one_of(values: type[StrEnum]) -> str:
    return ", ".join(f"'{value.value}'" for value in values)


class SettlementLine(Base):
    """A charge, capture or refund as the provider settled it: gross, fee, net, payout."""

    __tablename__ = "settlement_lines"
    __table_args__ = (
        CheckConstraint(f"record_type IN ({_one_of(RecordType)})", name="record_type_valid"),
        Index("ix_settlement_lines_payment_id", "payment_id"),
    )

    # The provider whose report listed it (a name of PAYMENTS_PROVIDERS), and its id of the
    # charge, capture or refund (`ch_...`, `cp_...`, `re_...`): unique per provider only.
    provider: Mapped[str] = mapped_column(Text, primary_key=True)
    provider_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    record_type: Mapped[str] = mapped_column(String(16))
    provider_key: Mapped[str] = mapped_column(String(128))
    # The payment the line belongs to (a refund's or a capture's line too), when we have a
    # row for it. A capture's is named by its key (`capture-<id>`). No foreign key:
    # `payments` is partitioned by day; the line is written from the payment it reads.
    payment_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    refund_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("refunds.id")
    )
    gross_minor: Mapped[int] = mapped_column(BigInteger)
    fee_minor: Mapped[int] = mapped_column(BigInteger)
    net_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    payout_id: Mapped[str] = mapped_column(String(64))
    settled_on: Mapped[date] = mapped_column(Date)
    recorded_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class ReconciliationItem(Base):
    """One discrepancy: a difference between our books and the provider's, and what became
    of it."""

    __tablename__ = "reconciliation_items"
    __table_args__ = (
        UniqueConstraint("record_type", "provider", "provider_key", "kind"),
        CheckConstraint(f"record_type IN ({_one_of(RecordType)})", name="record_type_valid"),
        CheckConstraint(f"kind IN ({_one_of(ItemKind)})", name="kind_valid"),
        CheckConstraint(f"state IN ({_one_of(ItemState)})", name="state_valid"),
        CheckConstraint(
            "(state IN ('resolved', 'dismissed')) = (resolved_by IS NOT NULL)",
            name="resolver_given",
        ),
        # The queue: open items by kind, oldest first (partial: only open rows).
        Index(
            "ix_reconciliation_items_open",
            "kind",
            "first_seen_at",
            "id",
            postgresql_where=text("state = 'open'"),
        ),
        # Every item, newest first, and a day's items (the run's own look back).
        Index("ix_reconciliation_items_seen", "first_seen_at", "id"),
        Index("ix_reconciliation_items_day", "day"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    # The creation day whose run found it first.
    day: Mapped[date] = mapped_column(Date)
    record_type: Mapped[str] = mapped_column(String(16))
    # The provider whose books hold (or should hold) the record, by name
    # (`app/provider/registry.py`): one provider's record is not another's.
    provider: Mapped[str] = mapped_column(Text)
    provider_key: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))
    tenant_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    operation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    payment_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    refund_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # Both sides as last compared: our record and the provider's (null where there is none).
    ours: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    theirs: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    detail: Mapped[str] = mapped_column(Text)
    first_seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    last_seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    resolution_reason: Mapped[str | None] = mapped_column(Text)


class ReconciliationItemChange(Base):
    """One change of an item's state: who, why, when (the audit trail)."""

    __tablename__ = "reconciliation_item_changes"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    item_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("reconciliation_items.id", ondelete="CASCADE"), index=True
    )
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class SettlementDay(Base):
    """One creation day's settlement: its lease while a run is under way, its last result."""

    __tablename__ = "settlement_days"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    # The run holding the day, until when, and its fence (`app/jobs/leases.py`): one higher
    # with every claim, and every write of a run checks its own (`days.hold`).
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    fence: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    runs: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    last_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What the last finished run counted (`app/settlement/run.py`, `Summary`).
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
