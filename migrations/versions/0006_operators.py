"""Operators: admin tokens, console sessions, and the indexes of the admin operation lists

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 17:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "admin_tokens",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_admin_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_admin_tokens_token_hash")),
    )
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.UUID(), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["admin_tokens.id"],
            name=op.f("fk_console_sessions_token_id_admin_tokens"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_token_id"), "console_sessions", ["token_id"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    # The admin lists page by (created_at, id): by state, by tenant, and the needs-attention
    # queue. CREATE INDEX (not CONCURRENTLY) blocks writes to operations while it builds: on
    # a large table, build these by hand with CONCURRENTLY first, and they are kept
    # (IF NOT EXISTS; docs/operators.md).
    op.create_index("ix_operations_state_created", "operations", ["state", "created_at", "id"])
    op.create_index("ix_operations_tenant_created", "operations", ["tenant_id", "created_at", "id"])
    op.create_index(
        "ix_operations_needs_attention",
        "operations",
        ["created_at", "id"],
        postgresql_where=sa.text("needs_attention"),
    )


def downgrade() -> None:
    op.drop_index("ix_operations_needs_attention", table_name="operations")
    op.drop_index("ix_operations_tenant_created", table_name="operations")
    op.drop_index("ix_operations_state_created", table_name="operations")
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_index(op.f("ix_console_sessions_token_id"), table_name="console_sessions")
    op.drop_table("console_sessions")
    op.drop_table("admin_tokens")
