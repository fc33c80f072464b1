"""A settlement day's lease with a fence, as every claimed row has

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A day is claimed as operations and webhook deliveries are (`app/jobs/leases.py`): the
    # owner's name, its lease and a fence one higher than the last owner's, which every
    # write of the run checks. The columns take the names that rule writes. A day under way
    # keeps its owner; its fence starts at 0 and its next claim makes it 1. The table has a
    # row per day settled: small, rewritten by neither statement (constant defaults).
    op.execute("ALTER TABLE settlement_days RENAME COLUMN owner TO lease_owner")
    op.execute("ALTER TABLE settlement_days ADD COLUMN fence bigint NOT NULL DEFAULT 0")
    op.execute(
        "ALTER TABLE settlement_days ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now()"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE settlement_days DROP COLUMN updated_at")
    op.execute("ALTER TABLE settlement_days DROP COLUMN fence")
    op.execute("ALTER TABLE settlement_days RENAME COLUMN lease_owner TO owner")
