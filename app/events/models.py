"""The events outbox: one row per final outcome, written with the outcome itself.

An event is inserted by the same statement that records the outcome (see `outbox.py`), so
an outcome that rolls back leaves no event and a recorded outcome never lacks one.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    String,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base

# The transaction id of the writer, as a bigint: `GET /events` orders by it (see reads.py).
CURRENT_XID = "(pg_current_xact_id()::text::bigint)"


class Event(Base):
    """One outcome, as published to the tenant (by `GET /events` and by webhooks)."""

    __tablename__ = "events"
    __table_args__ = (
        # One event of each type per operation: a retried or repeated write adds nothing
        # (payment.needs_attention is emitted once, when the operation is first flagged).
        UniqueConstraint("tenant_id", "operation_id", "type"),
        # The tenant's feed, in publication order.
        Index("ix_events_feed", "tenant_id", "txid", "seq"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    # Order within one transaction, and a tie-break: assigned at insert, not at commit.
    seq: Mapped[int] = mapped_column(BigInteger, Identity())
    # The writing transaction's id: a reader shows only events below its snapshot's xmin,
    # so an event can never appear behind a cursor a reader already passed.
    txid: Mapped[int] = mapped_column(BigInteger, server_default=text(CURRENT_XID))
    type: Mapped[str] = mapped_column(String(64))
    operation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("operations.id", ondelete="CASCADE")
    )
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
