"""Key lifecycle: keys released after their tombstone, indexes for the expire job

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:29:49.975423
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "operations", sa.Column("key_released_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.alter_column(
        "operations", "idempotency_key", existing_type=sa.VARCHAR(length=255), nullable=True
    )
    op.drop_index("ix_operations_terminal_created", table_name="operations")
    op.create_index(
        "ix_operations_response_expiry",
        "operations",
        ["completed_at"],
        unique=False,
        postgresql_where=sa.text(
            "state IN ('COMPLETED', 'FAILED') AND response_expired_at IS NULL"
        ),
    )
    op.create_index(
        "ix_operations_tombstone_release",
        "operations",
        ["completed_at"],
        unique=False,
        postgresql_where=sa.text("response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_operations_tombstone_release",
        table_name="operations",
        postgresql_where=sa.text("response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL"),
    )
    op.drop_index(
        "ix_operations_response_expiry",
        table_name="operations",
        postgresql_where=sa.text(
            "state IN ('COMPLETED', 'FAILED') AND response_expired_at IS NULL"
        ),
    )
    op.create_index(
        op.f("ix_operations_terminal_created"),
        "operations",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('COMPLETED', 'FAILED')"),
    )
    # Refuses to run while released keys (NULL) exist: they cannot be restored.
    op.alter_column(
        "operations", "idempotency_key", existing_type=sa.VARCHAR(length=255), nullable=False
    )
    op.drop_column("operations", "key_released_at")
