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
from psycopg import sql

from app.partitions.convert import ConversionError, convert_locked
from app.partitions.shapes import SHAPES, Shape

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
        convert_locked(_conn())
    except ConversionError as refused:
        raise SystemExit(f"migration 0031: {refused}") from None


def _unconvert(conn: Conn, shape: Shape) -> None:
    layout = shape.layout
    table, legacy = sql.Identifier(layout.table), sql.Identifier(layout.legacy)
    columns = sql.SQL(", ").join(
        sql.Identifier(str(row[0]))
        for row in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (layout.table,),
        ).fetchall()
    )
    conn.execute("LOCK TABLE operations IN SHARE ROW EXCLUSIVE MODE")
    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
    conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(table, legacy))
    conn.execute(
        sql.SQL("INSERT INTO {l} ({c}) SELECT {c} FROM {t}").format(l=legacy, c=columns, t=table)
    )
    at = None
    if shape.identity is not None:
        sequence = conn.execute(
            "SELECT pg_get_serial_sequence(%s, %s)", (layout.table, shape.identity)
        ).fetchone()
        assert sequence is not None
        at = conn.execute(
            sql.SQL("SELECT last_value, is_called FROM {}").format(sql.SQL(str(sequence[0])))
        ).fetchone()
    if shape.sequence is not None:
        conn.execute(
            sql.SQL("ALTER SEQUENCE {} OWNED BY {}.id").format(
                sql.Identifier(shape.sequence), legacy
            )
        )
    conn.execute(sql.SQL("DROP TABLE {}").format(table))
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(legacy, table))
    for name, _definition in shape.indexes:
        conn.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(f"{name}_legacy"), sql.Identifier(name)
            )
        )
    conn.execute(
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
            table, sql.Identifier(shape.legacy_pkey)
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id)").format(
            table, sql.Identifier(shape.old_primary_key)
        )
    )
    for name, definition in shape.legacy_unique:
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(table, sql.Identifier(name))
        )
        conn.execute(
            sql.SQL("CREATE UNIQUE INDEX {} ON {} {}").format(
                sql.Identifier(name), table, sql.SQL(definition)
            )
        )
    for name in shape.old_uniques:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} ADD CONSTRAINT {} UNIQUE (tenant_id, operation_id, type)"
            ).format(table, sql.Identifier(name))
        )
    conn.execute(
        sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL").format(
            table, sql.Identifier(layout.column)
        )
    )
    if shape.identity is not None and at is not None:
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} ADD GENERATED BY DEFAULT AS IDENTITY").format(
                table, sql.Identifier(shape.identity)
            )
        )
        conn.execute(
            "SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)",
            (layout.table, shape.identity, at[0], at[1]),
        )
    for fk in shape.incoming:
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                sql.Identifier(fk.table), sql.Identifier(fk.name), sql.SQL(fk.definition)
            )
        )


def downgrade() -> None:
    conn = _conn()
    for shape in SHAPES:
        _unconvert(conn, shape)
