"""The events outbox: one row per final outcome, written with the outcome itself.

An event is inserted by the same statement that records the outcome (see `outbox.py`), so
an outcome that rolls back leaves no event and a recorded outcome never lacks one.

Its publication to a broker's exchange is kept apart, as positions in each tenant's feed
(`event_publications`, `event_publication_cursors`; `publication.py`): an outcome's
statement writes nothing more for it, whether or not any worker publishes.
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

# The transaction id of the writer, as a bigint: `GET /events` orders by it (see reads.py).
CURRENT_XID = "(pg_current_xact_id()::text::bigint)"


class Event(Base):
    """One outcome, as published to the tenant (by `GET /events` and by webhooks)."""

    __tablename__ = "events"
    __table_args__ = (
        # One event of each type per operation: a retried or repeated write adds nothing
        # (payment.needs_attention is emitted once, when the operation is first flagged).
        # The key holds the operation's day, the partition column: an operation has one.
        UniqueConstraint("tenant_id", "operation_id", "type", "operation_created_at"),
        # The tenant's feed, in publication order.
        Index("ix_events_feed", "tenant_id", "txid", "seq"),
        # One partition per UTC day of the operation (docs/scaling.md, "Time partitions").
        {"postgresql_partition_by": "RANGE (operation_created_at)"},
    )

    # The key of a partitioned table holds its partition column: (id, operation_created_at).
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    # Order within one transaction, and a tie-break: assigned at insert, not at commit.
    seq: Mapped[int] = mapped_column(BigInteger, Identity())
    # The writing transaction's id: a reader shows only events below its snapshot's xmin,
    # so an event can never appear behind a cursor a reader already passed.
    txid: Mapped[int] = mapped_column(BigInteger, server_default=text(CURRENT_XID))
    type: Mapped[str] = mapped_column(String(64))
    # No foreign key to `operations`: it is partitioned by day, and a key to it would have
    # to name the day too; the outbox writes the event from the operation row it changes
    # (docs/scaling.md, "Time partitions").
    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # The operation's created_at, written by the outbox statement from the operation row it
    # reads: the partition column (migration 0030).
    operation_created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True
    )


class Publication(Base):
    """An exchange the events are published to (`app/broker/events.py`), and from where.

    Written once, by the first worker that publishes to the exchange: the events of every
    transaction that had not ended by then (`txid >= start_txid`, every tenant's, its
    tenants to come included) are published; older ones stay in the feed only.
    """

    __tablename__ = "event_publications"

    exchange: Mapped[str] = mapped_column(String(255), primary_key=True)
    start_txid: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class PublicationCursor(Base):
    """How far one tenant's feed has been published to an exchange (`publication.py`).

    Every event up to (`after_txid`, `after_seq`), in the feed's order, was confirmed by the
    broker; those after it are still to publish. A worker publishes a tenant's next events
    under a lease and a fence (`app/jobs/leases.py`), and moves the position only as far
    as the broker confirmed.
    """

    __tablename__ = "event_publication_cursors"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("tenants.id"), primary_key=True
    )
    exchange: Mapped[str] = mapped_column(
        String(255),
        ForeignKey("event_publications.exchange", ondelete="CASCADE"),
        primary_key=True,
    )
    # The last event published, as the feed orders them: (txid, seq).
    after_txid: Mapped[int] = mapped_column(BigInteger)
    after_seq: Mapped[int] = mapped_column(BigInteger)
    # Failed attempts since the last that succeeded (the backoff's exponent), and why the
    # last one failed.
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    last_error: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    fence: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
