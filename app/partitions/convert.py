"""The conversion of a table to day partitions, online: the same steps for an empty table
and one of a billion rows (docs/scaling.md, "Time partitions").

Per table (`SHAPES`, app/partitions/shapes.py), once it has its partition column (the
history's `operation_created_at`, added by migration 0030; the records' own `created_at`):

1. `backfill`: history rows still without their operation's day get it, in batches, each
   its own transaction when run online (row locks held for one batch). The records' column
   is NOT NULL already: nothing to fill.
2. `build_indexes`: the unique indexes the partitioned table needs (each holds the partition
   column) are built on the table itself, CONCURRENTLY when online.
3. `add_check`, `validate_check`: CHECK (<column> IS NOT NULL AND <column> < cutover)
   NOT VALID (under a short lock timeout, retried, online),
   then VALIDATE (a scan under SHARE UPDATE EXCLUSIVE: reads and writes go on). The
   cutover is a UTC midnight far enough ahead that the swap comes before it.
4. `swap`: one short transaction under `lock_timeout`, retried: the tables it touches are
   locked in the service's order (`LOCK_ORDER`), the foreign keys into the table and its
   row triggers are dropped, the table becomes `<table>_legacy`, the partitioned parent is
   created with the same columns, defaults and CHECKs, its keys and indexes (empty:
   instant), the legacy table is attached FOR VALUES FROM
   (MINVALUE) TO (cutover) (the CHECK proves the bound: no scan; its indexes and foreign
   keys are taken as the parent's), and the days from the cutover get their partitions.

Before the first step, when `payments` is among the tables, `require_payments_on_their_day`
proves each payment's `created_at` is its operation's (`payment_day.py`: one join scan),
and refuses, changing nothing, naming the payments and the repair, when one is not.

`convert_online` runs them with the service running (`payments partitions convert`);
migrations 0031 (the history) and 0033 (the records) run the same functions through
`convert_locked`, in their own transaction, under ACCESS EXCLUSIVE locks, on tables small
enough for that (`SMALL_ROWS`). Their downgrade is `unconvert.py`; what a swap touches
besides the table, `swap_scope.py`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from functools import partial

import psycopg
from psycopg import sql

from app.clock import utcnow
from app.partitions.layout import PartitionedTable, day_bounds
from app.partitions.payment_day import off_day
from app.partitions.shapes import LOCK_ORDER, PAYMENT_SHAPE, SHAPES, Shape
from app.partitions.swap_scope import dependent_views, swap_locks

logger = logging.getLogger("payments.partitions")

# Rows filled per batch: a few hundred milliseconds of work each.
BATCH = 20_000
# Up to this many rows a table is converted by `payments migrate` (0031) in one transaction;
# above, the migration refuses and points at `payments partitions convert`.
SMALL_ROWS = 100_000
# Day partitions created from the cutover on (the calendar keeps creating them ahead).
DAYS_AHEAD = 7
# The online cutover: the first UTC midnight at least this far ahead ...
LEAD = timedelta(hours=6)
# ... and the swap refuses to start when less than this is left before it.
SWAP_MARGIN = timedelta(minutes=10)
# The swap's wait for its locks, and how often it tries.
LOCK_TIMEOUT_MS = 2_000
SWAP_TRIES = 30


Conn = psycopg.Connection[tuple[object, ...]]


class ConversionError(RuntimeError):
    """The conversion cannot go on; the message says what to do."""


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _one(conn: Conn, query: sql.Composed | str, params: tuple[object, ...] | None = None) -> object:
    found = conn.execute(query, params).fetchone()
    return None if found is None else found[0]


def is_partitioned(conn: Conn, table: str) -> bool:
    """Whether `table` is already a partitioned table."""
    kind = _one(conn, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)", (table,))
    return kind == "p"


def row_count_over(conn: Conn, table: str, limit: int) -> bool:
    """Whether `table` holds more than `limit` rows (reads at most `limit` + 1)."""
    query = sql.SQL("SELECT count(*) FROM (SELECT FROM {} LIMIT %s) AS head").format(_ident(table))
    return int(str(_one(conn, query, (limit + 1,)))) > limit


def online_cutover(now: datetime) -> datetime:
    """The first UTC midnight at least `LEAD` after `now`."""
    return day_bounds((now + LEAD).astimezone(UTC).date())[1]


# 1. The backfill ------------------------------------------------------------------------


def backfill(conn: Conn, shape: Shape) -> int:
    """Give every row without it its operation's day, `BATCH` rows of `batch_column` at a
    time (each its own transaction when `conn` is in autocommit); how many rows it filled.
    Rows written from now on have it already (the service names it, else 0030's trigger).
    A table partitioned by its own NOT NULL column has nothing to fill."""
    table, column, by = shape.layout.table, shape.layout.column, shape.batch_column
    if by is None:
        return 0
    upto = int(
        str(
            _one(
                conn,
                sql.SQL("SELECT coalesce(max({}), 0) FROM {}").format(_ident(by), _ident(table)),
            )
        )
    )
    fill = sql.SQL(
        "UPDATE {t} AS x SET {c} = o.created_at FROM operations AS o"
        " WHERE o.id = x.operation_id AND x.{c} IS NULL AND x.{b} > %s AND x.{b} <= %s"
    ).format(t=_ident(table), c=_ident(column), b=_ident(by))
    filled = 0
    for after in range(0, upto, BATCH):
        filled += conn.execute(fill, (after, after + BATCH)).rowcount
    return filled


# 2. The indexes -------------------------------------------------------------------------


def _index_state(conn: Conn, name: str) -> bool | None:
    """None if there is no index `name`; else whether it is valid (a CONCURRENTLY build
    that failed leaves an invalid one behind)."""
    found = _one(
        conn,
        "SELECT x.indisvalid FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
        " WHERE i.relname = %s AND i.relnamespace = 'public'::regnamespace",
        (name,),
    )
    return None if found is None else bool(found)


def build_index(conn: Conn, table: str, name: str, columns: str, *, concurrently: bool) -> None:
    """A unique index `name` on `table` `columns`, unless a valid one is there already."""
    state = _index_state(conn, name)
    if state:
        return
    how = sql.SQL("CONCURRENTLY " if concurrently else "")
    if state is False:
        conn.execute(sql.SQL("DROP INDEX {}{}").format(how, _ident(name)))
    conn.execute(
        sql.SQL("CREATE UNIQUE INDEX {}{} ON {} {}").format(
            how, _ident(name), _ident(table), sql.SQL(columns)
        )
    )


def build_indexes(conn: Conn, shape: Shape, *, concurrently: bool) -> None:
    """The partitioned table's unique keys, built on the table as its legacy partition will
    hold them: the primary key (id, partition column), and each unique key."""
    table, column = shape.layout.table, shape.layout.column
    build_index(conn, table, shape.legacy_pkey, f"(id, {column})", concurrently=concurrently)
    for name, columns in shape.legacy_unique:
        build_index(conn, table, name, columns, concurrently=concurrently)


# 3. The cutover's proof -----------------------------------------------------------------


def proven_cutover(conn: Conn, shape: Shape) -> datetime | None:
    """The cutover a validated CHECK on the table proves, if there is one."""
    found = _one(
        conn,
        "SELECT obj_description(k.oid, 'pg_constraint') FROM pg_constraint k"
        " WHERE k.conrelid = to_regclass(%s) AND k.conname = %s AND k.convalidated",
        (shape.layout.table, shape.check),
    )
    return None if found is None else datetime.fromisoformat(str(found))


def add_check(conn: Conn, shape: Shape, cutover: datetime) -> None:
    """The CHECK for `cutover`, NOT VALID: a moment's ACCESS EXCLUSIVE lock, and every new
    row is held to it from then on. A CHECK for another cutover is replaced."""
    table, column, check = _ident(shape.layout.table), _ident(shape.layout.column), shape.check
    conn.execute(
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(table, _ident(check))
    )
    conn.execute(
        sql.SQL(
            "ALTER TABLE {t} ADD CONSTRAINT {k} CHECK ({c} IS NOT NULL AND {c} < {cut}) NOT VALID"
        ).format(t=table, k=_ident(check), c=column, cut=sql.Literal(cutover))
    )
    conn.execute(
        sql.SQL("COMMENT ON CONSTRAINT {} ON {} IS {}").format(
            _ident(check), table, sql.Literal(cutover.isoformat())
        )
    )


def validate_check(conn: Conn, shape: Shape) -> None:
    """Prove the CHECK on every row: one scan under SHARE UPDATE EXCLUSIVE (reads and writes
    go on)."""
    conn.execute(
        sql.SQL("ALTER TABLE {} VALIDATE CONSTRAINT {}").format(
            _ident(shape.layout.table), _ident(shape.check)
        )
    )


# 4. The swap ----------------------------------------------------------------------------


def day_partitions_sql(layout: PartitionedTable, first: date, days: int) -> list[sql.Composed]:
    """CREATE TABLE ... PARTITION OF for `days` days from `first`, each if not there."""
    statements = []
    for n in range(days):
        start, end = day_bounds(first + timedelta(days=n))
        statements.append(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})"
            ).format(
                _ident(layout.day_partition(start.date())),
                _ident(layout.table),
                sql.Literal(start),
                sql.Literal(end),
            )
        )
    return statements


def swap(conn: Conn, shape: Shape, cutover: datetime, *, days_ahead: int = DAYS_AHEAD) -> None:
    """Make the table partitioned, in the caller's transaction; every lock it takes is held
    to its end. Catalogue changes only: no step reads the table's rows."""
    layout = shape.layout
    table, legacy, column = _ident(layout.table), _ident(layout.legacy), _ident(layout.column)

    def run(statement: sql.Composed | sql.SQL) -> None:
        conn.execute(statement)

    for locked, mode in swap_locks(shape):
        run(sql.SQL("LOCK TABLE {} IN {} MODE").format(_ident(locked), sql.SQL(mode)))
    for fk in shape.incoming:
        run(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
                _ident(fk.table), _ident(fk.name)
            )
        )
    for trigger in shape.triggers:
        run(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(_ident(trigger), table))
        run(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(_ident(trigger)))
    views = dependent_views(conn, layout.table)
    run(sql.SQL("ALTER TABLE {} RENAME TO {}").format(table, legacy))
    for name, _columns in shape.indexes:
        run(
            sql.SQL("ALTER INDEX IF EXISTS {} RENAME TO {}").format(
                _ident(name), _ident(f"{name}_legacy")
            )
        )
    for name in (shape.old_primary_key, *(name for name, _columns in shape.old_uniques)):
        run(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(legacy, _ident(name)))
    # NOT NULL from the validated CHECK: no scan.
    run(sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET NOT NULL").format(legacy, column))
    run(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY USING INDEX {}").format(
            legacy, _ident(shape.legacy_pkey), _ident(shape.legacy_pkey)
        )
    )
    for name, _columns in shape.legacy_unique:
        run(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} UNIQUE USING INDEX {}").format(
                legacy, _ident(name), _ident(name)
            )
        )
    identity_at: tuple[object, ...] | None = None
    if shape.identity is not None:
        # A partition may not hold an identity of its own (PostgreSQL 17 on): the parent's
        # continues from where the legacy table's stopped.
        sequence = _one(
            conn, "SELECT pg_get_serial_sequence(%s, %s)", (layout.legacy, shape.identity)
        )
        identity_at = conn.execute(
            sql.SQL("SELECT last_value, is_called FROM {}").format(sql.SQL(str(sequence)))
        ).fetchone()
        run(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP IDENTITY").format(
                legacy, _ident(shape.identity)
            )
        )
    # The table's CHECKs as they are (the legacy partition's are merged with them at the
    # attach), but the cutover's, which is the legacy partition's alone.
    run(
        sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING CONSTRAINTS)"
            " PARTITION BY RANGE ({})"
        ).format(table, legacy, column)
    )
    run(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(table, _ident(shape.check)))
    if shape.identity is not None and identity_at is not None:
        run(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} ADD GENERATED BY DEFAULT AS IDENTITY").format(
                table, _ident(shape.identity)
            )
        )
        conn.execute(
            "SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)",
            (layout.table, shape.identity, identity_at[0], identity_at[1]),
        )
    if shape.sequence is not None:
        # The serial's sequence belongs to the parent: detaching the legacy partition and
        # dropping it later leaves it alone.
        run(sql.SQL("ALTER SEQUENCE {} OWNED BY {}.id").format(_ident(shape.sequence), table))
    run(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id, {})").format(
            table, _ident(shape.primary_key), column
        )
    )
    for name, columns in shape.uniques:
        run(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} UNIQUE {}").format(
                table, _ident(name), sql.SQL(columns)
            )
        )
    for name, definition in shape.indexes:
        # As the legacy table has it (then the parent's index takes it over, no build), or
        # the shape's where the table has none of that name.
        current = _one(
            conn,
            "SELECT substring(pg_get_indexdef(to_regclass(%s)) from ' USING .*$')",
            (f"{name}_legacy",),
        )
        how = definition if current is None else str(current)
        run(sql.SQL("CREATE INDEX {} ON {} {}").format(_ident(name), table, sql.SQL(how)))
    for fk in shape.foreign_keys:
        run(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                table, _ident(fk.name), sql.SQL(fk.definition)
            )
        )
    # The validated CHECK implies the partition's bound: ATTACH skips its scan.
    run(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM (MINVALUE) TO ({})").format(
            table, legacy, sql.Literal(cutover)
        )
    )
    run(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(legacy, _ident(shape.check)))
    for statement in day_partitions_sql(layout, cutover.date(), days_ahead):
        run(statement)
    # The views read the parent from now on, not the legacy partition alone.
    for name, body in views:
        run(sql.SQL("CREATE OR REPLACE VIEW {} AS {}").format(sql.SQL(name), sql.SQL(body)))


def with_short_locks(conn: Conn, what: str, step: Callable[[], None]) -> None:
    """`step` in a transaction of its own that waits at most `LOCK_TIMEOUT_MS` for each lock
    (behind a waiting ALTER TABLE the service's statements queue: they wait only that long),
    retried on a lock timeout or a deadlock; `conn` in autocommit."""
    for attempt in range(1, SWAP_TRIES + 1):
        try:
            with conn.transaction():
                timeout = sql.Literal(f"{LOCK_TIMEOUT_MS}ms")
                conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(timeout))
                step()
            return
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            logger.warning(
                "waited too long for locks; retrying",
                extra={"fields": {"step": what, "attempt": attempt}},
            )
            time.sleep(min(0.1 * attempt, 2.0))
    raise ConversionError(f"{what}: did not get its locks in {SWAP_TRIES} tries")


def swap_retried(
    conn: Conn, shape: Shape, cutover: datetime, *, now: Callable[[], datetime]
) -> None:
    """The swap, with short lock waits, retried; never within `SWAP_MARGIN` of the cutover."""

    def step() -> None:
        if now() > cutover - SWAP_MARGIN:
            raise ConversionError(
                f"{shape.layout.table}: the cutover {cutover.isoformat()} is too near to swap"
                " before it; run the conversion again (it proves a later cutover)"
            )
        swap(conn, shape, cutover)

    with_short_locks(conn, f"swap {shape.layout.table}", step)
    logger.info("table partitioned", extra={"fields": {"table": shape.layout.table}})


# The two ways to run it -----------------------------------------------------------------


def require_column(conn: Conn, shape: Shape) -> None:
    found = _one(
        conn,
        "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s"
        " AND NOT attisdropped",
        (shape.layout.table, shape.layout.column),
    )
    if found != 1:
        raise ConversionError(
            f"{shape.layout.table} has no {shape.layout.column}: run `payments migrate` first"
        )


def require_payments_on_their_day(conn: Conn, todo: list[Shape]) -> None:
    """Refuse to convert `payments` while a payment is off its operation's day
    (`payment_day.py`: why, and the repair). Run before anything changes."""
    found = off_day(conn) if PAYMENT_SHAPE in todo else None
    if found is not None:
        raise ConversionError(found.refusal())


def convert_online(
    conn: Conn, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> list[str]:
    """Partition every table of `SHAPES` not yet partitioned, with the service running (the
    history first, as the migrations do: 0031, then 0033);
    `conn` in autocommit, so that each step commits on its own. Safe to run again after a
    failure: each step sees what is done. The tables converted."""
    if not conn.autocommit:
        raise ConversionError("the online conversion needs a connection in autocommit")
    todo = [shape for shape in SHAPES if not is_partitioned(conn, shape.layout.table)]
    for shape in todo:
        require_column(conn, shape)
    # A scan of `payments` and `operations`, before the first step changes anything.
    require_payments_on_their_day(conn, todo)
    # One cutover for the family, kept from an earlier run while it is still far enough.
    proven = [c for s in todo if (c := proven_cutover(conn, s)) is not None]
    cutover = min(proven) if proven else online_cutover(now())
    if now() > cutover - SWAP_MARGIN:
        cutover = online_cutover(now())
    for shape in todo:
        filled = backfill(conn, shape)
        logger.info("backfilled", extra={"fields": {"table": shape.layout.table, "rows": filled}})
    for shape in todo:
        build_indexes(conn, shape, concurrently=True)
    for shape in todo:
        if proven_cutover(conn, shape) != cutover:
            add = partial(add_check, conn, shape, cutover)
            with_short_locks(conn, f"check {shape.layout.table}", add)
            validate_check(conn, shape)
    for shape in todo:
        swap_retried(conn, shape, cutover, now=now)
    return [shape.layout.table for shape in todo]


def convert_locked(conn: Conn, shapes: tuple[Shape, ...]) -> list[str]:
    """Partition every table of `shapes` not yet partitioned, in the caller's transaction,
    under ACCESS EXCLUSIVE locks (migrations 0031 and 0033, for small tables): nothing else
    writes while it runs, so the cutover is the day after the newest row's, today's at the
    least. Refuses (ConversionError) when a table holds more than `SMALL_ROWS` rows, or a
    payment's `created_at` is not its operation's."""
    todo = [shape for shape in shapes if not is_partitioned(conn, shape.layout.table)]
    for shape in todo:
        require_column(conn, shape)
    # Every lock any swap takes, in the service's order, the strongest mode asked for.
    modes: dict[str, str] = {}
    for shape in todo:
        for name, mode in swap_locks(shape):
            if modes.get(name) != "ACCESS EXCLUSIVE":
                modes[name] = mode
    for name in sorted(modes, key=LOCK_ORDER.index):
        conn.execute(sql.SQL("LOCK TABLE {} IN {} MODE").format(_ident(name), sql.SQL(modes[name])))
    big = [s.layout.table for s in todo if row_count_over(conn, s.layout.table, SMALL_ROWS)]
    if big:
        raise ConversionError(
            f"{', '.join(big)} hold more than {SMALL_ROWS} rows: partition them online with"
            " `payments partitions convert` (docs/operations.md), then run `payments migrate`"
            " again"
        )
    # After the size check: the migration reads no large table.
    require_payments_on_their_day(conn, todo)
    for shape in todo:
        backfill(conn, shape)
    newest = [
        _one(
            conn,
            sql.SQL("SELECT max({}) FROM {}").format(
                _ident(s.layout.column), _ident(s.layout.table)
            ),
        )
        for s in todo
    ]
    today = utcnow().date()
    days = [today] + [
        d.astimezone(UTC).date() + timedelta(days=1) for d in newest if isinstance(d, datetime)
    ]
    cutover = day_bounds(max(days))[0]
    for shape in todo:
        build_indexes(conn, shape, concurrently=False)
        add_check(conn, shape, cutover)
        validate_check(conn, shape)
        swap(conn, shape, cutover)
    return [shape.layout.table for shape in todo]
