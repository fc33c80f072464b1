"""PgBouncer in front of a PostgreSQL server, for the tests of the service behind a pooler.

Debian's `pgbouncer` package, run as the unprivileged service user under root (PgBouncer
refuses to run as root), on a free port with its files in a throwaway folder. Every
database name is passed through to the server (`* = host=... port=...`); authentication is
`trust`, as the test servers' own. The service's connections send libpq's `options`
(`-c statement_timeout=...`), which PgBouncer would refuse: `ignore_startup_parameters`
lets them through unread, and a deployment sets those limits on its role instead
(docs/operations.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from app.db.embedded import _free_port, _open_path_for, _run_as, ensure_service_user
from tests.support.control.waiting import wait_until

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def version() -> tuple[int, int] | None:
    """PgBouncer's version, or None when it is not installed."""
    if not Path(PGBOUNCER).exists():
        return None
    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"(\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2])) if found else None


def carries_prepared_statements() -> bool:
    """PgBouncer 1.21 and later prepare statements per server session in transaction mode."""
    return (version() or (0, 0)) >= (1, 21)


class PgBouncer:
    """One PgBouncer process; `url(database)` reaches `database` through it."""

    def __init__(self, root: Path, server_url: str, *, pool_mode: str, pool_size: int):
        server = urlsplit(server_url.split("?")[0])
        self.root = root
        self.server_host, self.server_port = server.hostname, server.port
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _config(self) -> str:
        lines = [
            "[databases]",
            f"* = host={self.server_host} port={self.server_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.root / 'userlist.txt'}",
            f"pool_mode = {self.pool_mode}",
            "max_client_conn = 500",
            f"default_pool_size = {self.pool_size}",
            "ignore_startup_parameters = options,extra_float_digits",
            f"logfile = {self.root / 'pgbouncer.log'}",
            "admin_users = postgres",
        ]
        if carries_prepared_statements():
            lines.append("max_prepared_statements = 200")
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        (self.root / "pgbouncer.ini").write_text(self._config())
        user = _run_as()
        if user is not None:
            ensure_service_user()
            _open_path_for(self.root, user)
        with (self.root / "stdout.log").open("wb") as log:
            self.process = subprocess.Popen(
                [PGBOUNCER, str(self.root / "pgbouncer.ini")],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=user,
            )

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError((self.root / "stdout.log").read_text())
            try:
                with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
                    conn.execute("SELECT 1")
            except psycopg.OperationalError:
                return False
            return True

        wait_until(answers, timeout=60, message="PgBouncer to accept connections")

    def log(self) -> str:
        return (self.root / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


@contextmanager
def pgbouncer(
    server_url: str, *, pool_mode: str = "transaction", pool_size: int = 4
) -> Iterator[PgBouncer]:
    """A started PgBouncer in front of the server of `server_url`, stopped after."""
    root = Path(tempfile.mkdtemp(prefix="payments-pgbouncer-"))
    bouncer = PgBouncer(root, server_url, pool_mode=pool_mode, pool_size=pool_size)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(root, ignore_errors=True)
