"""Retention: partitions entirely past their table's retention are detached and dropped
(archived first when PAYMENTS_PARTITION_ARCHIVE_DIR is set), never deleted row by row.

Each table has its own retention in days (`retention_days`, PAYMENTS_RETENTION_DAYS_<TABLE>;
unset: kept forever). A partition is past it when its upper bound is at or before today's
midnight (UTC, by the database's clock) less that many days: every row in it is at least that
old. Then, unless a rule keeps it (`holds.py`: an operation of its range not final, its days'
settlement not closed, a key still held, its operations still kept, a restored
partition), a pass:

1. marks it (`COMMENT`, with its bound, so the table can be found and reattached however
   the pass ends);
2. `ALTER TABLE ... DETACH PARTITION ... CONCURRENTLY`: no lock that stops the table's
   readers and writers; it runs in two transactions of its own, so never in a transaction
   block (the pool's connections are autocommit);
3. archives it, when a folder is set (`archive.py`);
4. drops it.

A pass that died between the detach's two transactions leaves the partition "detach
pending"; the next pass finishes it (`DETACH ... FINALIZE`) before anything else. One that
died after the detach leaves a marked table attached to nothing; the next pass archives and
drops it. Only tables this pass marked are ever dropped: a table named like a partition but
not marked is left alone.

One worker at a time runs the pass (a session-level advisory lock, tried, not waited for:
the others skip it), table after table in the catalogue's order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

from psycopg import sql

from app.db.database import Connection
from app.partitions.archive import write_archive
from app.partitions.holds import hold
from app.partitions.layout import PartitionedTable, day_bounds
from app.partitions.present import Partition, database_today, shape_of, standalone

logger = logging.getLogger("payments.partitions")

DETACHED_MARK = "payments: detached past retention;"
# The pass's lock: one per schema the tables are found in (the search path's first).
_KEY = "hashtext('payments.partitions.retention:' || current_schema())"
_TRY_LOCK = f"SELECT pg_try_advisory_lock({_KEY})"
_UNLOCK = f"SELECT pg_advisory_unlock({_KEY})"


@dataclass
class Retired:
    """What one pass did to one table."""

    table: str
    finalized: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    # Partitions past retention kept, and by which rule.
    held: dict[str, str] = field(default_factory=dict)


def past_retention(partition: Partition, today: date, retention_days: int) -> bool:
    """Whether every row `partition` can hold is at least `retention_days` days old."""
    cutoff, _ = day_bounds(today - timedelta(days=retention_days))
    return partition.upper is not None and partition.upper <= cutoff


def _ours(table: PartitionedTable, name: str) -> bool:
    return name == table.legacy or table.day_of(name) is not None


async def retire(
    conn: Connection,
    table: PartitionedTable,
    *,
    retention_days: int | None,
    today: date | None = None,
    archive_dir: Path | None = None,
) -> Retired:
    """One table's pass; `conn` must be in autocommit mode (DETACH CONCURRENTLY)."""
    done = Retired(table.table)
    shape = await shape_of(conn, table)
    if shape is None:
        return done
    parent = sql.Identifier(shape.schema, table.table)
    for partition in shape.partitions:
        if partition.detach_pending:
            # A detach begun and never finished: the partition takes no rows any more.
            child = sql.Identifier(shape.schema, partition.name)
            await conn.execute(
                sql.SQL("ALTER TABLE {parent} DETACH PARTITION {child} FINALIZE").format(
                    parent=parent, child=child
                )
            )
            done.finalized.append(partition.name)
    if retention_days is None:
        return done
    when = today if today is not None else await database_today(conn)
    for partition in shape.partitions:
        if partition.detach_pending or not _ours(table, partition.name):
            continue
        if not past_retention(partition, when, retention_days):
            continue
        assert partition.upper is not None
        reason = await hold(
            conn,
            table.table,
            lower=partition.lower,
            upper=partition.upper,
            comment=partition.comment,
        )
        if reason is not None:
            done.held[partition.name] = reason
            continue
        child = sql.Identifier(shape.schema, partition.name)
        mark = f"{DETACHED_MARK} {partition.bound}"
        await conn.execute(
            sql.SQL("COMMENT ON TABLE {child} IS {mark}").format(
                child=child, mark=sql.Literal(mark)
            )
        )
        await conn.execute(
            sql.SQL("ALTER TABLE {parent} DETACH PARTITION {child} CONCURRENTLY").format(
                parent=parent, child=child
            )
        )
        done.detached.append(partition.name)
    for name, comment in await standalone(conn, table, shape.schema):
        if not comment.startswith(DETACHED_MARK):
            continue
        child = sql.Identifier(shape.schema, name)
        if archive_dir is not None:
            bound = comment.removeprefix(DETACHED_MARK).strip()
            await write_archive(
                conn, table, schema=shape.schema, partition=name, bound=bound, folder=archive_dir
            )
            done.archived.append(name)
        await conn.execute(sql.SQL("DROP TABLE {child}").format(child=child))
        done.dropped.append(name)
    if done.dropped or done.held or done.finalized:
        logger.info(
            "partitions past retention",
            extra={
                "fields": {
                    "table": table.table,
                    "dropped": done.dropped,
                    "archived": done.archived,
                    "held": done.held,
                    "finalized": done.finalized,
                }
            },
        )
    return done


async def retire_all(
    conn: Connection,
    tables: tuple[PartitionedTable, ...],
    retention: Mapping[str, int | None],
    *,
    today: date | None = None,
    archive_dir: Path | None = None,
) -> list[Retired] | None:
    """Every table's pass, under the one lock of the pass; None when another worker holds it
    (it is doing the same)."""
    locked = await (await conn.execute(_TRY_LOCK)).fetchone()
    if locked is None or not locked[0]:
        return None
    try:
        return [
            await retire(
                conn,
                table,
                retention_days=retention.get(table.table),
                today=today,
                archive_dir=archive_dir,
            )
            for table in tables
        ]
    finally:
        await conn.execute(_UNLOCK)
