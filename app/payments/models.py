"""The payments table (the business object an operation creates) and its failovers."""

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
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.payments.attempts import CAUSES
from app.payments.status import CaptureMode, PaymentStatus

_STATUSES = ", ".join(f"'{s.value}'" for s in PaymentStatus)
_MODES = ", ".join(f"'{m.value}'" for m in CaptureMode)
_CAUSES = ", ".join(f"'{cause}'" for cause in CAUSES)


class Payment(Base):
    """A charge we asked the provider for, with the stable key every call for it uses."""

    __tablename__ = "payments"
    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUSES})", name="status_valid"),
        CheckConstraint("amount_minor > 0", name="amount_positive"),
        CheckConstraint(
            "amount_refunded_minor >= 0 AND amount_refunded_minor <= amount_minor",
            name="refunded_within_amount",
        ),
        CheckConstraint("attempt >= 0 AND attempt < cardinality(route)", name="attempt_on_route"),
        CheckConstraint(f"capture_mode IN ({_MODES})", name="capture_mode_valid"),
        # Captures never pass the authorized amount, refunds never pass what was captured:
        # the last line of defence behind the claims' locks and checks.
        CheckConstraint(
            "amount_captured_minor >= 0 AND amount_captured_minor <= amount_minor",
            name="captured_within_amount",
        ),
        CheckConstraint(
            "capture_mode = 'automatic' OR amount_refunded_minor <= amount_captured_minor",
            name="refunded_within_captured",
        ),
        CheckConstraint(
            "(capture_mode = 'manual') = (capture_before IS NOT NULL)",
            name="capture_before_iff_manual",
        ),
        # The worker's expiry of lapsed authorizations reads only the holds still open,
        # tenant by tenant (`app/authorizations/expiry.py`).
        Index(
            "ix_payments_open_holds",
            "tenant_id",
            "capture_before",
            postgresql_where=text("status IN ('AUTHORIZED', 'PARTIALLY_CAPTURED')"),
        ),
        # Settlement reconciliation reads a day's payments by creation time; rows arrive in
        # that order, so a BRIN index answers it for a few pages, at almost no cost per insert.
        Index("ix_payments_created_at_brin", "created_at", postgresql_using="brin"),
        # The operators' search across tenants (`app/admin/search.py`): by the provider's
        # charge id, by the merchant's reference, and an account's payments, newest first.
        Index(
            "ix_payments_provider_charge_id",
            "provider_charge_id",
            postgresql_where=text("provider_charge_id IS NOT NULL"),
        ),
        Index(
            "ix_payments_merchant_reference",
            "merchant_reference",
            postgresql_where=text("merchant_reference IS NOT NULL"),
        ),
        Index("ix_payments_account_created", "account_id", "created_at", "id"),
        # The operators' list, newest first, across tenants and for one (`operator_reads.py`).
        Index("ix_payments_created", "created_at", "id"),
        Index("ix_payments_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_payments_status_created", "status", "created_at", "id"),
        # One payment per operation, and one per provider key: a partitioned table's unique
        # key holds its partition column. Each is unique on its own by construction (an
        # operation makes its one payment in its claim's statement; the provider key is
        # derived from the payment's id, a random UUID).
        UniqueConstraint("operation_id", "created_at"),
        UniqueConstraint("provider_key", "created_at"),
        # One partition per UTC day of the operation (docs/scaling.md, "Time partitions";
        # the partitions: app/partitions/layout.py).
        {"postgresql_partition_by": "RANGE (created_at)"},
    )

    # The key of a partitioned table holds its partition column: (id, created_at). The id
    # is a random UUID, unique by construction.
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("tenants.id"), index=True
    )
    # The operation that made it, in its claim's statement. No foreign key: `operations` is
    # partitioned by day, and a key to it would have to name the day too (the payment's
    # `created_at` is its operation's).
    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    # Derived from our own payment id and stored at claim time; every provider call for this
    # payment, first or recovery, sends it, so the provider can deduplicate.
    provider_key: Mapped[str] = mapped_column(String(128))
    # The providers its attempts go to, by name, chosen once at the claim
    # (`app/provider/routing.py`): attempt n is sent to route[n] under
    # `attempt_key(provider_key, n)`, and nowhere else.
    route: Mapped[list[str]] = mapped_column(ARRAY(Text))
    # The attempt it is at; moved on only by a fenced failover (`app/payments/kind.py`).
    # Once final, the attempt its outcome came from: route[attempt] holds its charge.
    attempt: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    status: Mapped[str] = mapped_column(String(32))
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    account_id: Mapped[str] = mapped_column(String(64))
    merchant_reference: Mapped[str | None] = mapped_column(String(128))
    description: Mapped[str | None] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=text("'{}'::jsonb")
    )
    provider_charge_id: Mapped[str | None] = mapped_column(String(128))
    decline_code: Mapped[str | None] = mapped_column(String(128))
    # The sum of the payment's succeeded refunds, kept by each refund's outcome statement so
    # a payment read needs no join.
    amount_refunded_minor: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    # `automatic`: charged at once; `manual`: authorized, then captured by its captures
    # (`app/authorizations/`) until `capture_before`, when the hold lapses.
    capture_mode: Mapped[str] = mapped_column(String(16), server_default=text("'automatic'"))
    capture_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The sum of a manual payment's succeeded captures (0 for a one-step payment, whose
    # status says what it took: `PaymentRow.taken_minor`). Refunds give back at most that.
    amount_captured_minor: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    # The operation of the capture or void in flight, set by its claim and cleared by its
    # outcome (`app/authorizations/repository.py`): what the claims and the expiry read
    # under the payment's row lock.
    modifying_operation_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # Its operation's `created_at`, written by the claim's statement from the operation row
    # it inserts: the partition column, so a payment is in its operation's day.
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True, server_default=func.now()
    )
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class PaymentFailover(Base):
    """A payment's move to the next provider on its route, as facts: the audited failover
    transition it belongs to says it in words (`reason`), this row in columns.

    Written by the failover's own fenced statement (`app/payments/attempts.py`), so it
    exists exactly when the transition does. The dashboard counts a window's by provider and
    cause; a payment's page and the admin API say why each attempt was left behind.
    """

    __tablename__ = "payment_failovers"
    __table_args__ = (
        CheckConstraint(f"cause IN ({_CAUSES})", name="cause_known"),
        CheckConstraint("from_attempt >= 0", name="from_attempt_on_route"),
        # A payment leaves each attempt at most once: its attempt only ever moves forward.
        UniqueConstraint("tenant_id", "payment_id", "from_attempt"),
        # The dashboard counts a window's failovers across tenants.
        Index("ix_payment_failovers_created_at", "created_at"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("tenants.id"), primary_key=True
    )
    # The audited failover transition this row records (an identity the service mints).
    # No foreign key: `operation_transitions` is partitioned by its operation's day, and a
    # key to it would have to name that day too. The statement that writes this row takes
    # the id from the transition it inserts (`RETURNING`), so it exists exactly when the
    # transition does (docs/scaling.md, "Time partitions").
    transition_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # No foreign key: `payments` is partitioned by day; the failover's statement writes
    # this row beside its fenced update of the payment.
    payment_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    from_attempt: Mapped[int] = mapped_column(SmallInteger)
    from_provider: Mapped[str] = mapped_column(Text)
    to_provider: Mapped[str] = mapped_column(Text)
    cause: Mapped[str] = mapped_column(Text)
    # The decline code (declined), or why the only send was not processed (not_processed).
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.clock_timestamp()
    )
