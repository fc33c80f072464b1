"""Settlement compares captures: `capture` is a record type of the settled lines and of the
discrepancy queue

A manual payment's money settles through its captures, each a line of the provider's report
of its own (type `capture`), compared with our capture under its key: the record type checks
of `settlement_lines` and `reconciliation_items` admit it. Nothing stored changes.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("settlement_lines", "reconciliation_items")
OLD_TYPES = "record_type IN ('charge', 'refund')"
NEW_TYPES = "record_type IN ('charge', 'refund', 'capture')"


def _record_types(check: str) -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT ck_{table}_record_type_valid")
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT ck_{table}_record_type_valid CHECK ({check})"
        )


def upgrade() -> None:
    # Every stored row passes the new check (it is wider than the old). Adding it scans each
    # table once, under the ALTER's lock, held to the migration's commit: reads and writes of
    # the lines and the queue (settlement runs, the operators' queue) wait that long, nothing
    # else does (`settlement_lines` holds a narrow row per settled record).
    _record_types(NEW_TYPES)


def downgrade() -> None:
    bind = op.get_bind()
    stored = {
        table: bind.execute(
            sa.text(f"SELECT count(*) FROM {table} WHERE record_type = 'capture'")
        ).scalar_one()
        for table in TABLES
    }
    if any(stored.values()):
        counts = ", ".join(f"{count} in {table}" for table, count in stored.items() if count)
        raise RuntimeError(
            f"captures were settled ({counts}); a schema without them cannot hold them, so"
            " nothing was changed"
        )
    _record_types(OLD_TYPES)
