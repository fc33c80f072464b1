"""What PostgreSQL itself counted of a process's work: transactions committed in the test
database (`pg_stat_database.xact_commit`) and scans of a table (`pg_stat_user_tables`).

A backend reports its counts when idle, at most once a second and up to ten seconds later,
and always when it exits. So a test reads them before starting the process whose work it
counts and again once `stop_and_wait_for_counts` has stopped it and seen every backend that served
it gone: everything that process did is in the second reading, whatever the timing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until


@dataclass(frozen=True)
class Counts:
    """Transactions committed in the database, and scans (sequential or by index) per table."""

    transactions: int
    scans: dict[str, int]

    def since(self, before: Counts) -> Counts:
        return Counts(
            self.transactions - before.transactions,
            {table: n - before.scans.get(table, 0) for table, n in self.scans.items()},
        )


def read_counts(db: psycopg.Connection[DictRow], *tables: str) -> Counts:
    """The database's counts now, as far as its backends have reported them (this
    connection's own included: it reports what it has pending first)."""
    db.execute("SELECT pg_stat_force_next_flush()")
    db.execute("SELECT pg_stat_clear_snapshot()")
    row = db.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    scans = {
        found["relname"]: found["scans"]
        for found in db.execute(
            "SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS scans"
            " FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (list(tables),),
        ).fetchall()
    }
    return Counts(int(row["xact_commit"]), scans)


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (Linux's /proc)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            found += _process_tree(int(child))
    return found


def _local_tcp_ports(pids: list[int]) -> set[int]:
    """The local ports of the TCP sockets these processes hold open."""
    sockets: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                sockets.add(target.removeprefix("socket:[").removesuffix("]"))
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in sockets:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def backends_of(db: psycopg.Connection[DictRow], process: Process) -> set[int]:
    """The PostgreSQL backends (pids) serving `process`'s connections, and its children's."""
    ports = _local_tcp_ports(_process_tree(process.pid))
    rows = db.execute(
        "SELECT pid, client_port FROM pg_stat_activity WHERE datname = current_database()"
    ).fetchall()
    return {row["pid"] for row in rows if row["client_port"] in ports}


def stop_and_wait_for_counts(db: psycopg.Connection[DictRow], process: Process) -> None:
    """Stop `process` and wait until every backend that served it has exited (and so has
    reported its counts)."""
    backends = backends_of(db, process)
    assert backends, "the process holds no database connection"
    process.stop()

    def gone() -> bool:
        rows = db.execute("SELECT pid FROM pg_stat_activity").fetchall()
        return not backends & {row["pid"] for row in rows}

    wait_until(gone, timeout=15, message="the process's database backends to exit")
