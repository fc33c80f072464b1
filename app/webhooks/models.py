"""Webhook endpoints, one delivery per (event, endpoint), and every attempt made.

webhook_endpoints   a tenant's URL, the event types it wants, its signing secrets
webhook_deliveries  created with the event (the outbox statement fans out to the
                    endpoints subscribed at that moment); claimed by workers under a
                    lease and a fence, retried with backoff until it succeeds or ages out
webhook_attempts    every HTTP attempt: status code or error, latency, which worker
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The endpoint was deleted before the delivery succeeded.
    CANCELLED = "cancelled"


_STATUSES = ", ".join(f"'{s.value}'" for s in DeliveryStatus)


class WebhookEndpoint(Base):
    """Where a tenant wants its events sent, and the secrets that sign them."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (
        Index("ix_webhook_endpoints_tenant_id_created_at", "tenant_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    url: Mapped[str] = mapped_column(Text)
    # NULL: every event type, including types added later.
    event_types: Mapped[list[str] | None] = mapped_column(ARRAY(String(64)))
    # Kept as issued: signing needs the secret itself, so it cannot be hashed.
    secret: Mapped[str] = mapped_column(String(128))
    # After a rotation the old secret signs too, until it expires (24 h).
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_secret_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WebhookDelivery(Base):
    """One event on its way to one endpoint."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("tenant_id", "event_id", "endpoint_id"),
        CheckConstraint(f"status IN ({_STATUSES})", name="status_valid"),
        # Pending deliveries by their next attempt (the backlog gauges read it).
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
        ),
        # The claim, tenant by tenant: each endpoint's oldest due deliveries, at most its cap
        # of them (`app/webhooks/deliveries.py`).
        Index(
            "ix_webhook_deliveries_endpoint_due",
            "tenant_id",
            "endpoint_id",
            "next_attempt_at",
            "id",
            postgresql_where=text("status = 'pending'"),
        ),
        # The operators' list of deliveries that gave up, newest first, across tenants.
        Index(
            "ix_webhook_deliveries_failed",
            "completed_at",
            "id",
            postgresql_where=text("status = 'failed'"),
        ),
        Index(
            "ix_webhook_deliveries_tenant_id_endpoint_id_created_at",
            "tenant_id",
            "endpoint_id",
            "created_at",
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    # No foreign key: `events` is partitioned by its operation's day, and a key to it would
    # have to name that day too. The outbox statement writes the delivery from the event it
    # inserts (`RETURNING`), so it never names an event that is not there (docs/scaling.md,
    # "Time partitions").
    event_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    endpoint_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("webhook_endpoints.id")
    )
    status: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    attempt_count: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # Retries go on until started_at + PAYMENTS_WEBHOOK_MAX_AGE_S; a redelivery restarts it.
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    next_attempt_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    # A worker's claim: one attempt at a time per delivery, and a fenced record of it.
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    fence: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class WebhookAttempt(Base):
    """One HTTP attempt of a delivery, as the worker saw it."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (
        # The dashboard's delivery success over a window: rows arrive in time order.
        Index("ix_webhook_attempts_attempted_brin", "attempted_at", postgresql_using="brin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    delivery_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True
    )
    worker: Mapped[str] = mapped_column(String(128))
    succeeded: Mapped[bool] = mapped_column(Boolean)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[int] = mapped_column(Integer)
    attempted_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
