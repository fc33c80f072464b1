"""The inbox's retention: applied and rejected provider events by arrival

The worker deletes the events done with once they are older than
PAYMENTS_PROVIDER_EVENTS_RETENTION_DAYS (app/provider_events/retention.py), oldest first, a
batch at a time: this partial index holds just those rows, so a pass reads only what it
deletes, however many parked events stay. A new index: no stored row changes. As 0011's: on a
large table create it CONCURRENTLY by hand first; IF NOT EXISTS then skips it.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_provider_events_done ON provider_events (received_at)"
        " WHERE state IN ('applied', 'rejected')"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_provider_events_done")
