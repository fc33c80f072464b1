"""The dashboard's charts: entries into recovery, and webhook attempts by time

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 19:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Partial: only the transitions into recovery (incidents, a few in a thousand), so the
    # backlog chart reads them all for a few pages (`app/admin/activity.py`).
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_operation_transitions_recovery"
        " ON operation_transitions (created_at)"
        " WHERE to_state = 'UNKNOWN_REQUIRES_RECOVERY'"
    )
    # Attempts arrive in time order: a BRIN index finds a window's for a few pages, at
    # almost no cost per insert (as the settlement run's on payments).
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_webhook_attempts_attempted_brin"
        " ON webhook_attempts USING brin (attempted_at)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_webhook_attempts_attempted_brin")
    op.execute("DROP INDEX IF EXISTS ix_operation_transitions_recovery")
