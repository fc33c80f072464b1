"""A settlement day's lease with a fence, as every claimed row has; a discrepancy
dismissed by an operator is `dismissed`, no longer `void`

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

ITEMS = "reconciliation_items"
CHANGES = "reconciliation_item_changes"


def _states(closed_by_operator: str) -> None:
    """The state checks of the discrepancy queue, with `closed_by_operator` as the state an
    operator's dismissal writes."""
    op.execute(
        f"ALTER TABLE {ITEMS} ADD CONSTRAINT ck_{ITEMS}_state_valid"
        f" CHECK (state IN ('open', 'auto_resolved', 'resolved', '{closed_by_operator}'))"
    )
    op.execute(
        f"ALTER TABLE {ITEMS} ADD CONSTRAINT ck_{ITEMS}_resolver_given"
        f" CHECK ((state IN ('resolved', '{closed_by_operator}')) = (resolved_by IS NOT NULL))"
    )


def _rename_state(old: str, new: str) -> None:
    """Every stored `old` state of the queue and of its history becomes `new`."""
    op.execute(f"ALTER TABLE {ITEMS} DROP CONSTRAINT ck_{ITEMS}_state_valid")
    op.execute(f"ALTER TABLE {ITEMS} DROP CONSTRAINT ck_{ITEMS}_resolver_given")
    op.execute(f"UPDATE {ITEMS} SET state = '{new}' WHERE state = '{old}'")
    op.execute(f"UPDATE {CHANGES} SET to_state = '{new}' WHERE to_state = '{old}'")
    op.execute(f"UPDATE {CHANGES} SET from_state = '{new}' WHERE from_state = '{old}'")
    _states(new)


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
    # `void` is a payment operation's word (authorize, capture, void); a discrepancy an
    # operator closes as never a real difference is `dismissed`. The queue holds
    # differences only, and its history their changes: a few rows, updated in place.
    _rename_state("void", "dismissed")


def downgrade() -> None:
    _rename_state("dismissed", "void")
    op.execute("ALTER TABLE settlement_days DROP COLUMN updated_at")
    op.execute("ALTER TABLE settlement_days DROP COLUMN fence")
    op.execute("ALTER TABLE settlement_days RENAME COLUMN lease_owner TO owner")
