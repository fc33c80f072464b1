"""The audit trail and the events partitioned by their operation's day

`operation_transitions` and `events` become partitioned tables, RANGE on
`operation_created_at`, one partition per UTC day (docs/scaling.md, "Time partitions"),
by the conversion of app/partitions/convert.py: the rows from before go into one partition,
`<table>_legacy`, for every day below the cutover, and the days from the cutover on get a
partition each.

A migration holds its locks to its end: here every table is locked (ACCESS EXCLUSIVE; and
`operations` against writes) while the rows written before get their day, the new keys are
built and the table is swapped. That is quick on a new or small database (up to
`SMALL_ROWS` rows per table), which this migration converts. On a larger one it changes
nothing and stops, pointing at `payments partitions convert`: the same conversion, run with
the service up (each step its own transaction, the indexes built CONCURRENTLY, the swap a
short transaction under a lock timeout, retried); `payments migrate` then finds the tables
partitioned and goes on. Run it with every process of the new release deployed: a process
of the previous release does not write `operation_created_at`, and a row without it has no
partition to go to (its statement fails, writing nothing).

Foreign keys to these tables (`payment_failovers.transition_id`,
`webhook_deliveries.event_id`) are dropped: a key to a partitioned table must name its
whole unique key, (id, operation_created_at). What keeps them true is said in
docs/scaling.md and tested in tests/partitions/test_references.py.

The downgrade, for a small database only, copies the day partitions' rows back into the
legacy table and gives it the keys of 0030.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27 17:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import psycopg
from alembic import op

from app.partitions.convert import ConversionError, convert_locked
from app.partitions.shapes import HISTORY_SHAPES
from app.partitions.unconvert import unconvert

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Conn = psycopg.Connection[tuple[object, ...]]


def _conn() -> Conn:
    """The migration's own psycopg connection, in the migration's transaction."""
    return cast(Conn, op.get_bind().connection.driver_connection)


def upgrade() -> None:
    try:
        convert_locked(_conn(), HISTORY_SHAPES)
    except ConversionError as refused:
        raise SystemExit(f"migration 0031: {refused}") from None


def downgrade() -> None:
    conn = _conn()
    for shape in HISTORY_SHAPES:
        unconvert(conn, shape)
