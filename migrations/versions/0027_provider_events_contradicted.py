"""A provider's notification that contradicts a final outcome is `contradicted`

The apply step compares an event about a final operation with what we recorded; one that
contradicts it is kept as `contradicted` (and queued as a discrepancy), never applied
(app/provider_events/contradiction.py). The state check admits the new state; the retention's
partial index takes it among the events done with; a partial index of just the contradicted
events lets the gauge count them without reading the rest. The check is added NOT VALID and
then validated (a scan that blocks no writes); both indexes are small, as 0025's: on a large
inbox create them CONCURRENTLY by hand first, IF NOT EXISTS then skips the new one.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-30 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "provider_events"
CHECK = "ck_provider_events_state_valid"


def _states(states: str, done: str) -> None:
    """The state check admitting `states`, and the retention's index over `done`."""
    op.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {CHECK}")
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {CHECK} CHECK (state IN ({states})) NOT VALID")
    op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {CHECK}")
    op.execute("DROP INDEX IF EXISTS ix_provider_events_done")
    op.execute(
        f"CREATE INDEX ix_provider_events_done ON {TABLE} (received_at) WHERE state IN ({done})"
    )


def upgrade() -> None:
    _states(
        "'received', 'applied', 'parked', 'rejected', 'contradicted'",
        "'applied', 'rejected', 'contradicted'",
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS ix_provider_events_contradicted ON {TABLE} (received_at)"
        " WHERE state = 'contradicted'"
    )


def downgrade() -> None:
    # A contradicted event was never applied: it is what an operator looks at, as a parked
    # one is (its discrepancy stays in the queue).
    op.execute(
        f"UPDATE {TABLE} SET state = 'parked', next_attempt_at = NULL WHERE state = 'contradicted'"
    )
    op.execute("DROP INDEX IF EXISTS ix_provider_events_contradicted")
    _states("'received', 'applied', 'parked', 'rejected'", "'applied', 'rejected'")
