"""Settlement reconciliation: settlement lines, reconciliation items and their audit, days run

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 15:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RECORD_TYPES = "record_type IN ('charge', 'refund')"
KINDS = (
    "kind IN ('missing', 'orphan', 'amount_mismatch', 'currency_mismatch', "
    "'status_mismatch', 'expected')"
)
STATES = "state IN ('open', 'auto_resolved', 'resolved', 'void')"


def upgrade() -> None:
    # A day's payments and refunds by creation time. BRIN: rows arrive in creation order, so
    # the index is a few pages and costs an insert almost nothing (a B-tree on a timestamp
    # would be one more tree to update per payment).
    op.create_index(
        "ix_payments_created_at_brin", "payments", ["created_at"], postgresql_using="brin"
    )
    op.create_index(
        "ix_refunds_created_at_brin", "refunds", ["created_at"], postgresql_using="brin"
    )
    op.create_table(
        "settlement_lines",
        sa.Column("provider_id", sa.String(128), primary_key=True),
        sa.Column("record_type", sa.String(16), nullable=False),
        sa.Column("provider_key", sa.String(128), nullable=False),
        sa.Column("payment_id", postgresql.UUID(as_uuid=True), sa.ForeignKey("payments.id")),
        sa.Column("refund_id", postgresql.UUID(as_uuid=True), sa.ForeignKey("refunds.id")),
        sa.Column("gross_minor", sa.BigInteger(), nullable=False),
        sa.Column("fee_minor", sa.BigInteger(), nullable=False),
        sa.Column("net_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("payout_id", sa.String(64), nullable=False),
        sa.Column("settled_on", sa.Date(), nullable=False),
        sa.Column(
            "recorded_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(RECORD_TYPES, name="record_type_valid"),
    )
    op.create_index("ix_settlement_lines_payment_id", "settlement_lines", ["payment_id"])
    op.create_table(
        "reconciliation_items",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("record_type", sa.String(16), nullable=False),
        sa.Column("provider_key", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tenant_id", postgresql.UUID(as_uuid=True)),
        sa.Column("operation_id", postgresql.UUID(as_uuid=True)),
        sa.Column("payment_id", postgresql.UUID(as_uuid=True)),
        sa.Column("refund_id", postgresql.UUID(as_uuid=True)),
        sa.Column("ours", postgresql.JSONB()),
        sa.Column("theirs", postgresql.JSONB()),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column(
            "last_seen_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("resolved_at", sa.DateTime(timezone=True)),
        sa.Column("resolved_by", sa.String(200)),
        sa.Column("resolution_reason", sa.Text()),
        sa.UniqueConstraint("record_type", "provider_key", "kind"),
        sa.CheckConstraint(RECORD_TYPES, name="record_type_valid"),
        sa.CheckConstraint(KINDS, name="kind_valid"),
        sa.CheckConstraint(STATES, name="state_valid"),
        sa.CheckConstraint(
            "(state IN ('resolved', 'void')) = (resolved_by IS NOT NULL)", name="resolver_given"
        ),
    )
    op.create_index(
        "ix_reconciliation_items_open",
        "reconciliation_items",
        ["kind", "first_seen_at", "id"],
        postgresql_where=sa.text("state = 'open'"),
    )
    op.create_index("ix_reconciliation_items_seen", "reconciliation_items", ["first_seen_at", "id"])
    op.create_index("ix_reconciliation_items_day", "reconciliation_items", ["day"])
    op.create_table(
        "reconciliation_item_changes",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column(
            "item_id",
            postgresql.UUID(as_uuid=True),
            sa.ForeignKey("reconciliation_items.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index(
        "ix_reconciliation_item_changes_item_id", "reconciliation_item_changes", ["item_id"]
    )
    op.create_table(
        "settlement_days",
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("owner", sa.String(200)),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True)),
        sa.Column("runs", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_started_at", sa.DateTime(timezone=True)),
        sa.Column("last_finished_at", sa.DateTime(timezone=True)),
        sa.Column("summary", postgresql.JSONB()),
    )


def downgrade() -> None:
    op.drop_table("settlement_days")
    op.drop_table("reconciliation_item_changes")
    op.drop_table("reconciliation_items")
    op.drop_table("settlement_lines")
    op.drop_index("ix_refunds_created_at_brin", table_name="refunds")
    op.drop_index("ix_payments_created_at_brin", table_name="payments")
