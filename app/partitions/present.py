"""What the database holds of a partitioned table: its partitions and their ranges.

Read from the system catalogues, never from the names alone: a partition's range is its
bound (`pg_get_expr(relpartbound)`), `FROM (MINVALUE)` read as no lower end. A partition
whose detach was begun (`DETACH ... CONCURRENTLY`) and not finished (the process died
between its two transactions) is listed with `detach_pending`: it no longer takes rows and
waits for `DETACH ... FINALIZE`.

A table of the catalogue that is not partitioned in this database (not converted yet) has
no partitions to keep: `partitions_of` answers None and the calendar leaves it alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from app.db.database import Connection
from app.partitions.layout import PartitionedTable, day_bounds

# The parent's schema, when `table` (resolved by the search path) is partitioned.
_PARENT = """
    SELECT n.nspname FROM pg_partitioned_table p
    JOIN pg_class c ON c.oid = p.partrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE p.partrelid = to_regclass(%(table)s)
"""
# Each partition with its bounds as timestamps (NULL for MINVALUE / MAXVALUE), whether its
# detach is pending, and its comment.
_PARTITIONS = r"""
    SELECT c.relname,
           NULLIF(substring(b.expr FROM 'FROM \(''([^'']*)''\)'), '')::timestamptz,
           NULLIF(substring(b.expr FROM 'TO \(''([^'']*)''\)'), '')::timestamptz,
           i.inhdetachpending,
           b.expr,
           obj_description(c.oid, 'pg_class')
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) b
    WHERE i.inhparent = to_regclass(%(table)s)
    ORDER BY 2 NULLS FIRST, c.relname
"""
# Tables of the parent's schema that are no partition (detached), with their comments.
_STANDALONE = """
    SELECT c.relname, obj_description(c.oid, 'pg_class')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relkind = 'r' AND NOT c.relispartition
      AND c.relname LIKE %(prefix)s
    ORDER BY c.relname
"""


@dataclass(frozen=True)
class Partition:
    """One partition as the database has it."""

    name: str
    # [lower, upper); None: MINVALUE (the legacy partition's lower end) or MAXVALUE.
    lower: datetime | None
    upper: datetime | None
    detach_pending: bool
    # `FOR VALUES FROM (...) TO (...)`, as PostgreSQL prints it: what reattaches it.
    bound: str
    comment: str | None

    def covers(self, day: date) -> bool:
        """Whether every row of `day` (UTC) lands here."""
        start, end = day_bounds(day)
        low_ok = self.lower is None or self.lower <= start
        high_ok = self.upper is None or end <= self.upper
        return low_ok and high_ok and not self.detach_pending


@dataclass(frozen=True)
class Shape:
    """A partitioned table in the database: its schema and its partitions."""

    schema: str
    partitions: tuple[Partition, ...]

    def names(self) -> frozenset[str]:
        return frozenset(partition.name for partition in self.partitions)

    def days_ahead(self, today: date, *, horizon: int = 366) -> int:
        """Days from `today` on (today included) whose rows have a partition, counted until
        the first that has none: 0 when today's rows are refused already."""
        covered = 0
        while covered < horizon:
            day = today + timedelta(days=covered)
            if not any(partition.covers(day) for partition in self.partitions):
                break
            covered += 1
        return covered


async def shape_of(conn: Connection, table: PartitionedTable) -> Shape | None:
    """`table`'s partitions, or None when it is not partitioned in this database."""
    row = await (await conn.execute(_PARENT, {"table": table.table})).fetchone()
    if row is None:
        return None
    rows = await (await conn.execute(_PARTITIONS, {"table": table.table})).fetchall()
    partitions = tuple(
        Partition(
            name=name,
            lower=lower,
            upper=upper,
            detach_pending=bool(pending),
            bound=bound,
            comment=comment,
        )
        for name, lower, upper, pending, bound, comment in rows
    )
    return Shape(schema=str(row[0]), partitions=partitions)


async def standalone(
    conn: Connection, table: PartitionedTable, schema: str
) -> list[tuple[str, str]]:
    """Tables of `schema` named as `table`'s partitions (a day's or the legacy one) that are
    attached to nothing, each with its comment (tables without one are left out)."""
    params = {"schema": schema, "prefix": f"{table.table}\\_%"}
    rows = await (await conn.execute(_STANDALONE, params)).fetchall()
    return [
        (str(name), str(comment))
        for name, comment in rows
        if comment is not None and (name == table.legacy or table.day_of(name) is not None)
    ]


async def database_today(conn: Connection) -> date:
    """Today in UTC by the database's clock: the one every worker agrees on."""
    row = await (await conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date")).fetchone()
    assert row is not None
    day: date = row[0]
    return day
