"""The inbox of providers' notifications: `provider_events`, one row per event kept.

A row is written when a signed event arrives (`inbox.py`), `received`; the apply step
moves it on (`applied`, `parked` for a later try, `rejected`, `contradicted`). The inbox
knows no tenant until an event is applied: its keys are the provider's, so they do not lead
with `tenant_id` (tests/db/test_tenant_keys.py names the table and why).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Identity,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.provider_events.rows import DONE, PENDING, EventState

_STATES = ", ".join(f"'{state.value}'" for state in EventState)
_PENDING = ", ".join(f"'{state.value}'" for state in PENDING)
_DONE = ", ".join(f"'{state.value}'" for state in DONE)


class ProviderEvent(Base):
    """One event a provider sent, kept once whatever its deliveries."""

    __tablename__ = "provider_events"
    __table_args__ = (
        CheckConstraint(f"state IN ({_STATES})", name="state_valid"),
        CheckConstraint("attempts >= 0", name="attempts_not_negative"),
        # An event is kept once: a redelivery inserts nothing (ON CONFLICT DO NOTHING).
        UniqueConstraint("provider", "event_id"),
        # The apply step's scan: what is still to apply, by when it is due.
        Index(
            "ix_provider_events_due",
            "next_attempt_at",
            postgresql_where=text(f"state IN ({_PENDING})"),
        ),
        # The retention's scan: the events done with, oldest first (`retention.py`).
        Index(
            "ix_provider_events_done",
            "received_at",
            postgresql_where=text(f"state IN ({_DONE})"),
        ),
        # The gauge's count of the contradicted events (`operator_reads.py`).
        Index(
            "ix_provider_events_contradicted",
            "received_at",
            postgresql_where=text(f"state = '{EventState.CONTRADICTED.value}'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    # The configured provider's name (`PAYMENTS_PROVIDERS`), from the URL it posted to.
    provider: Mapped[str] = mapped_column(Text)
    event_id: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(Text)
    # The record's idempotency key: ours, derived (`payment-<id>`), when it names one.
    provider_key: Mapped[str | None] = mapped_column(Text)
    # The event as it came (the first delivery's, should a later one differ).
    body: Mapped[dict[str, Any]] = mapped_column(JSONB)
    received_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    state: Mapped[str] = mapped_column(Text, server_default=text(f"'{EventState.RECEIVED}'"))
    # Why it was parked, rejected or contradicted (or what applying it found).
    reason: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # When the apply step is to look at it: at once when received.
    next_attempt_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The operation it was applied to. No foreign key: the operations are the tenants'
    # (distributed by tenant on Citus, docs/scaling.md), the inbox is no one tenant's.
    operation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
