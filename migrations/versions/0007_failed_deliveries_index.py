"""The operators' list of failed webhook deliveries: a partial index, newest failure first

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22 18:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Only failed rows, so it stays small however many deliveries succeed. A plain CREATE
    # INDEX blocks writes to webhook_deliveries while it runs: on a large table, create it
    # CONCURRENTLY by hand first (same name and columns); IF NOT EXISTS then skips it.
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_failed"
        " ON webhook_deliveries (completed_at, id) WHERE status = 'failed'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_webhook_deliveries_failed")
