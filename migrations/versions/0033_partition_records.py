"""The operations and their payments partitioned by day

`operations` and `payments` become partitioned tables, RANGE on their `created_at`, one
partition per UTC day (docs/scaling.md, "Time partitions"), by the conversion that
partitioned the history (migration 0031, app/partitions/convert.py): the rows from before go
into one partition, `<table>_legacy`, for every day below the cutover, and the days from
the cutover on get a partition each. A payment's `created_at` is its operation's (the
claim's statement writes both from the same row), so a day's partitions of the four tables
hold the whole story of that day's operations.

The keys become what a partitioned table can hold:

- the primary keys are (id, created_at); an id stays unique by construction (a random UUID);
- `operations` loses its unique (tenant_id, operation_name, idempotency_key), with no
  replacement: the key table `idempotency_keys` (migration 0029), never partitioned, decides
  the claim. With it go 0029's two triggers and their functions, which kept the key table in
  step for a process of the release before it: every process claims and releases through the
  key table itself now;
- `payments`' uniques become (operation_id, created_at) and (provider_key, created_at): an
  operation makes one payment, in its claim's statement, and the provider key is derived
  from the payment's id;
- the foreign keys into `operations(id)` and `payments(id)` (from the audit trail, the
  events, payments, refunds, payment modifications, settlement lines, failover records) are
  dropped: a key to a partitioned table must name its whole key. Each referencing row is
  written in the statement or transaction that reads or locks what it names, and nothing
  deletes those rows but retention (docs/scaling.md; tests/partitions/test_references.py).

Like 0031, the migration converts the tables in its own transaction when each holds at
most `SMALL_ROWS` rows (a new database); on a larger one it changes nothing and stops,
pointing at `payments partitions convert`, which converts them online with the service up.
Run either once every process runs this release or the one before (0029 on): a process
older than that claims by the unique key this migration drops.

The downgrade, for a small database only, copies the day partitions' rows back, gives
the tables their keys and foreign keys again, and makes 0029's triggers again.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-27 22:00:00.000000
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import psycopg
from alembic import op

from app.partitions.convert import ConversionError, convert_locked
from app.partitions.shapes import RECORD_SHAPES
from app.partitions.unconvert import unconvert

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Conn = psycopg.Connection[tuple[object, ...]]


def _conn() -> Conn:
    """The migration's own psycopg connection, in the migration's transaction."""
    return cast(Conn, op.get_bind().connection.driver_connection)


def upgrade() -> None:
    try:
        convert_locked(_conn(), RECORD_SHAPES)
    except ConversionError as refused:
        raise SystemExit(f"migration 0033: {refused}") from None


def _key_table_triggers() -> tuple[tuple[str, str, str], ...]:
    """Migration 0029's triggers, (name, function, trigger), as it made them."""
    path = Path(__file__).with_name("0029_idempotency_keys.py")
    spec = importlib.util.spec_from_file_location("migration_0029", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(tuple[tuple[str, str, str], ...], module.TRIGGERS)


def downgrade() -> None:
    conn = _conn()
    for shape in reversed(RECORD_SHAPES):
        unconvert(conn, shape)
    for _name, function, trigger in _key_table_triggers():
        op.execute(function)
        op.execute(trigger)
