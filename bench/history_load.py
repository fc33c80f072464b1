"""How `bench/history_seed.py` loads its rows fast: every index out of the way, several
connections inserting, the indexes built once at the end.

PostgreSQL's own advice for populating a database ("Populating a Database" in its manual):
drop the indexes and foreign keys, load, then build them; raise `maintenance_work_mem` for
the builds and `max_wal_size` for the load. Here:

- **Out of the way for the load:** the foreign keys of the seeded tables and those naming
  them from other tables, the secondary indexes, and the primary keys and unique
  constraints. A unique index that takes its rows one at a time in random order (a random
  key's, a provider key's) touches a random leaf page per row: past `shared_buffers`, a
  page read and one written back per row, which is where an earlier seeding spent its time
  (its rate fell from 4,400 to 2,300 payments a second by 3 million). Built once at the end
  from the sorted rows, each is one pass. Adding a primary key or a unique constraint back
  checks every row against it, and adding a foreign key back checks every reference, so a
  row the load got wrong still fails the seeding.
- **The key table's claim trigger** (migrations 0029 to 0032, a layout that has it) inserts
  a key's row before each operation, `ON CONFLICT` on the key table's primary key, which is
  dropped for the load: it is disabled for the load instead (the seeding writes each key's
  row itself) and enabled again after it.
- **Several connections** (`jobs`, default 2) insert chunks at once, each chunk its own
  transaction: the rows are made by PostgreSQL (`INSERT ... SELECT` over
  `generate_series`), a core's work per connection.
- **A chunk is retried** when the server refuses it for a shared resource another session
  holds (the lock table full: `out of shared memory`; a deadlock; a serialization failure):
  its transaction rolled back, it has left nothing.
- **The builds** run on `jobs` connections too (`maintenance_work_mem` 512 MB each): the
  primary keys and unique constraints first, then the secondary indexes, then the foreign
  keys, one at a time (each locks two tables).

A seeding that fails leaves a database to drop, not to use: its constraints may be missing
and the claim trigger disabled.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

# What a chunk is retried for: a resource another session holds, not the chunk's fault.
RETRIED = (
    psycopg.errors.OutOfMemory,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)
ATTEMPTS = 5
MAINTENANCE_WORK_MEM = "512MB"
CLAIM_TRIGGER = "idempotency_keys_claim"


@dataclass(frozen=True)
class Rebuild:
    """A constraint or an index dropped for the load, and the statement that puts it back."""

    name: str
    table: str
    definition: str


@dataclass(frozen=True)
class OutOfTheWay:
    """What the load dropped (and disabled), in the order it is put back."""

    constraints: list[Rebuild]
    indexes: list[Rebuild]
    foreign_keys: list[Rebuild]
    disabled_triggers: list[tuple[str, str]]


def _log(message: str) -> None:
    print(f"history_seed: {message}", file=sys.stderr, flush=True)


def secondary_indexes(conn: psycopg.Connection[Any], tables: Sequence[str]) -> list[Rebuild]:
    """The indexes of `tables` that back no constraint (primary key, unique, exclusion)."""
    rows = conn.execute(
        "SELECT i.relname, t.relname, pg_get_indexdef(x.indexrelid)"
        " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
        " JOIN pg_class t ON t.oid = x.indrelid"
        " WHERE t.relname = ANY(%s) AND t.relnamespace = current_schema()::regnamespace"
        " AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = x.indexrelid)"
        " ORDER BY t.relname, i.relname",
        (list(tables),),
    ).fetchall()
    # A partitioned table's index prints as `ON ONLY parent`, which would build the parent's
    # index alone (invalid, its partitions without one): built on the whole table instead.
    return [
        Rebuild(name, table, definition.replace(" ON ONLY ", " ON ", 1))
        for name, table, definition in rows
    ]


def _constraints(conn: psycopg.Connection[Any], where: str, tables: Sequence[str]) -> list[Rebuild]:
    rows = conn.execute(
        "SELECT c.conname, t.relname, pg_get_constraintdef(c.oid)"
        " FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid"
        f" WHERE c.conparentid = 0 AND t.relnamespace = current_schema()::regnamespace"
        f" AND {where} ORDER BY t.relname, c.conname",
        {"tables": list(tables)},
    ).fetchall()
    return [
        Rebuild(name, table, f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        for name, table, definition in rows
    ]


def foreign_keys(conn: psycopg.Connection[Any], tables: Sequence[str]) -> list[Rebuild]:
    """The foreign keys of `tables` and those of other tables naming them."""
    return _constraints(
        conn,
        "c.contype = 'f' AND (t.relname = ANY(%(tables)s) OR c.confrelid IN"
        " (SELECT oid FROM pg_class WHERE relname = ANY(%(tables)s)"
        " AND relnamespace = current_schema()::regnamespace))",
        tables,
    )


def unique_constraints(conn: psycopg.Connection[Any], tables: Sequence[str]) -> list[Rebuild]:
    """The primary keys and unique constraints of `tables`."""
    return _constraints(conn, "c.contype IN ('p', 'u') AND t.relname = ANY(%(tables)s)", tables)


def _claim_triggers(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT t.relname, g.tgname FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid"
        " WHERE g.tgname = %s AND g.tgparentid = 0 AND g.tgenabled <> 'D'"
        " AND t.relnamespace = current_schema()::regnamespace",
        (CLAIM_TRIGGER,),
    ).fetchall()
    return [(table, name) for table, name in rows]


def clear_the_way(conn: psycopg.Connection[Any], tables: Sequence[str]) -> OutOfTheWay:
    """Drop what slows the load of `tables` (one transaction); what to put back."""
    dropped = OutOfTheWay(
        constraints=unique_constraints(conn, tables),
        indexes=secondary_indexes(conn, tables),
        foreign_keys=foreign_keys(conn, tables),
        disabled_triggers=_claim_triggers(conn),
    )
    with conn.transaction():
        for key in dropped.foreign_keys:
            conn.execute(f'ALTER TABLE {key.table} DROP CONSTRAINT "{key.name}"')
        for index in dropped.indexes:
            conn.execute(f'DROP INDEX "{index.name}"')
        for constraint in dropped.constraints:
            conn.execute(f'ALTER TABLE {constraint.table} DROP CONSTRAINT "{constraint.name}"')
        for table, trigger in dropped.disabled_triggers:
            conn.execute(f'ALTER TABLE {table} DISABLE TRIGGER "{trigger}"')
    _log(
        f"dropped {len(dropped.constraints)} primary keys and unique constraints, "
        f"{len(dropped.indexes)} secondary indexes and {len(dropped.foreign_keys)} foreign "
        f"keys; disabled {len(dropped.disabled_triggers)} claim triggers"
    )
    return dropped


def _retried(conn: psycopg.Connection[Any], work: Callable[[], None]) -> int:
    """Run `work` in a transaction of `conn`, again when a shared resource refused it; how
    many attempts it took."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with conn.transaction():
                work()
            return attempt
        except RETRIED as exc:
            if attempt == ATTEMPTS:
                raise
            _log(f"retrying a chunk after {type(exc).__name__}: {str(exc).splitlines()[0]}")
            time.sleep(2 ** (attempt - 1))
    raise AssertionError("unreachable")


def insert_chunks(
    url: str,
    statements: Sequence[str],
    params: dict[str, Any],
    *,
    payments: int,
    chunk: int,
    jobs: int,
    progress: bool,
) -> int:
    """Run `statements` for each chunk of `chunk` payments, on `jobs` connections at once;
    how many chunks had to be retried."""
    starts = iter(range(0, payments, chunk))
    taking = threading.Lock()
    counting = threading.Lock()
    done = retried = 0
    began = time.perf_counter()

    def load() -> None:
        nonlocal done, retried
        with psycopg.connect(url, autocommit=True) as conn:
            while True:
                with taking:
                    first = next(starts, None)
                if first is None:
                    return
                own = params | {"first": first, "last": min(payments, first + chunk) - 1}

                def run(own: dict[str, Any] = own) -> None:
                    for sql in statements:
                        conn.execute(sql, own)

                attempts = _retried(conn, run)
                with counting:
                    done += own["last"] - first + 1
                    retried += attempts > 1
                    if progress:
                        elapsed = time.perf_counter() - began
                        _log(
                            f"inserted {done:,} payments in {elapsed:.0f} s "
                            f"({done / elapsed:,.0f}/s)"
                        )

    _in_parallel([load] * max(1, jobs), jobs)
    return retried


def _in_parallel(work: Iterable[Callable[[], None]], jobs: int) -> None:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(task) for task in work]:
            future.result()


def _build(url: str, items: Sequence[Rebuild], jobs: int, times: dict[str, float]) -> None:
    """Run each item's statement, `jobs` at a time, each on a connection of its own."""
    pending = iter(items)
    taking = threading.Lock()

    def build() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
            while True:
                with taking:
                    item = next(pending, None)
                if item is None:
                    return
                at = time.perf_counter()
                conn.execute(item.definition)
                times[item.name] = round(time.perf_counter() - at, 2)

    _in_parallel([build] * max(1, min(jobs, len(items))), jobs)


def put_back(url: str, dropped: OutOfTheWay, *, jobs: int) -> dict[str, float]:
    """Build what `clear_the_way` dropped and enable what it disabled; each build's seconds.
    Unique constraints first (what the foreign keys name), the foreign keys one at a time."""
    times: dict[str, float] = {}
    _build(url, dropped.constraints, jobs, times)
    _build(url, dropped.indexes, jobs, times)
    _build(url, dropped.foreign_keys, 1, times)
    with psycopg.connect(url, autocommit=True) as conn:
        for table, trigger in dropped.disabled_triggers:
            conn.execute(f'ALTER TABLE {table} ENABLE TRIGGER "{trigger}"')
    return times
