"""The webhook claim's per-endpoint reads: pending deliveries by endpoint and next attempt

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 06:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Partial: only pending deliveries. The claim reads each endpoint's oldest due ones from
    # its own range, at most its cap of them (`app/webhooks/deliveries.py`), instead of
    # ranking every due delivery of every tenant. As 0011's: on a large table create it
    # CONCURRENTLY by hand first; IF NOT EXISTS then skips it.
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_endpoint_due"
        " ON webhook_deliveries (endpoint_id, next_attempt_at, id)"
        " WHERE status = 'pending'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_webhook_deliveries_endpoint_due")
