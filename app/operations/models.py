"""The idempotency record (`operations`), its keys (`idempotency_keys`) and its audit trail
(`operation_transitions`).

An operation is one client request identified by (tenant, operation name, idempotency key).
The key table's primary key on that triple is what decides races: the first INSERT of the
key wins and inserts its operation, every other request finds the winner's row through the
key. The key table is narrow and never partitioned, so the operations and their history beside it
are partitioned by time (docs/scaling.md).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

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
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base
from app.operations.states import State

_STATES = ", ".join(f"'{s.value}'" for s in State)


class Operation(Base):
    """One idempotent request: its key, fingerprint, state, owner lease and stored response."""

    __tablename__ = "operations"
    __table_args__ = (
        CheckConstraint(f"state IN ({_STATES})", name="state_valid"),
        CheckConstraint("fence >= 1", name="fence_positive"),
        # The reconcile scan, tenant by tenant (`app/operations/leases.py`): what is unknown
        # and due, or in flight with an expired lease (`ix_operations_in_flight_lease`, below:
        # a lease given back, NULL, sorts first).
        Index(
            "ix_operations_recovery_due",
            "tenant_id",
            "next_check_at",
            postgresql_where=text("state = 'UNKNOWN_REQUIRES_RECOVERY'"),
        ),
        # The operators' lists (`app/operations/operator_reads.py`), paged by (created_at,
        # id): by state, by tenant, and the needs-attention queue (partial: only flagged rows).
        Index("ix_operations_state_created", "state", "created_at", "id"),
        Index("ix_operations_tenant_created", "tenant_id", "created_at", "id"),
        Index(
            "ix_operations_needs_attention",
            "created_at",
            "id",
            postgresql_where=text("needs_attention"),
        ),
        # The operators' search by idempotency key, across tenants (`app/admin/search.py`).
        Index(
            "ix_operations_idempotency_key",
            "idempotency_key",
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        # The expire job: terminal operations still holding a response, by age ...
        Index(
            "ix_operations_response_expiry",
            "completed_at",
            postgresql_where=text(
                "state IN ('COMPLETED', 'FAILED') AND response_expired_at IS NULL"
            ),
        ),
        # ... and tombstones still holding their key, by age.
        Index(
            "ix_operations_tombstone_release",
            "completed_at",
            postgresql_where=text(
                "response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL"
            ),
        ),
        # One partition per UTC day of creation (docs/scaling.md, "Time partitions"; the
        # partitions: app/partitions/layout.py). No unique key on the idempotency key: the
        # key table below decides the claim (migration 0033 dropped it).
        {"postgresql_partition_by": "RANGE (created_at)"},
    )

    # The key of a partitioned table holds its partition column: (id, created_at). The id
    # is a random UUID, unique by construction.
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    # No index of its own: `ix_operations_tenant_created` leads with tenant_id.
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("tenants.id"))
    operation_name: Mapped[str] = mapped_column(String(64))
    # NULL once the tombstone is released: the key is then free for a new operation, while
    # the operation row, its payment link and its history stay.
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32))
    # Ownership: whoever holds an unexpired lease may act on the operation; every write it
    # makes is conditional on `fence`, which grows with every new owner.
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    fence: Mapped[int] = mapped_column(BigInteger, server_default=text("1"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_check_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    needs_attention: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    last_error: Mapped[str | None] = mapped_column(Text)
    # The stored outcome: replayed byte for byte to every later request with the key.
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_headers: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    response_body: Mapped[str | None] = mapped_column(Text)
    # The claim's `now()`, the same as its key's `operation_created_at`: the partition column.
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True, server_default=func.now()
    )
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Set by the expire job when it drops the stored response and keeps only a tombstone.
    response_expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Set when the tombstone is released and the key cleared.
    key_released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The W3C traceparent of the request that claimed it, when that request was traced: the
    # worker's reconcile and the webhook deliveries link their traces to it (docs/tracing.md).
    traceparent: Mapped[str | None] = mapped_column(String(128))


Index(
    "ix_operations_in_flight_lease",
    Operation.tenant_id,
    Operation.lease_expires_at.nullsfirst(),
    postgresql_where=text("state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')"),
)


class IdempotencyKey(Base):
    """A claimed key and the operation it names, from the claim until the key is released.

    The claim inserts this row first (its primary key decides the race) and the operation
    only from the row it inserted; a read by key comes through here to the operation by its
    id and `created_at`, the column `operations` is partitioned by. Releasing the key
    deletes the row. No foreign key to `operations`: one to a table partitioned by time would
    have to name the partition column too, and the claim writes both rows in one statement.
    """

    __tablename__ = "idempotency_keys"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("tenants.id"), primary_key=True
    )
    operation_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    # The operation's `created_at`, the same `now()` of the same statement: a read through
    # the key names the operation's partition.
    operation_created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class OperationTransition(Base):
    """One audited state change, written in the same transaction as the change."""

    __tablename__ = "operation_transitions"
    __table_args__ = (
        # The dashboard's recovery backlog: only the entries into recovery, by time.
        Index(
            "ix_operation_transitions_recovery",
            "created_at",
            postgresql_where=text("to_state = 'UNKNOWN_REQUIRES_RECOVERY'"),
        ),
        # One partition per UTC day of the operation (docs/scaling.md, "Time partitions";
        # the partitions: app/partitions/layout.py).
        {"postgresql_partition_by": "RANGE (operation_created_at)"},
    )

    # The key of a partitioned table holds its partition column: (id, operation_created_at).
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    # No foreign key to `operations`: it is partitioned by day, and a key to it would have
    # to name the day too; the verb writes this row from the operation row it changes.
    operation_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), index=True)
    # The operation's tenant, written by the verb from the row it changes: every statement
    # of a verb stays within one tenant (on Citus, this table is co-located with
    # `operations`). Migration 0028 filled the rows written before.
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str] = mapped_column(String(32))
    trigger: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str | None] = mapped_column(Text)
    fence: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.clock_timestamp()
    )
    # The operation's created_at, written by the verb from the row it changes: the table is
    # partitioned by it, so an operation's whole trail is in its day's partition, however
    # late a row is written (a recovery days later). Migration 0030 added it.
    operation_created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), primary_key=True
    )
