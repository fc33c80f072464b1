"""The dashboard's failovers: failover transitions by time

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 23:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Partial: only the failovers (a payment's move to its next provider; none at all with
    # one provider, a few in a thousand payments otherwise), so the dashboard reads a
    # window's for a few pages (`app/admin/failovers.py`). As 0011's: on a large table
    # create it CONCURRENTLY by hand first; IF NOT EXISTS then skips it.
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_operation_transitions_failover"
        " ON operation_transitions (created_at)"
        " WHERE trigger = 'failover'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_operation_transitions_failover")
