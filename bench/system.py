"""Starting what the bench measures: PostgreSQL, the fake provider, the API, a tenant.

The process helpers are the test suite's (`tests/support`): start a real process, wait until
it answers, stop or kill it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade_head
from app.tenants.keys import hash_api_key
from tests.support.control.database import as_url
from tests.support.control.processes import PAYMENTS, REPO_ROOT, Process, free_port, start_process
from tests.support.control.system import admin_env, start_fake_provider, system_env

BENCH_ROOT = REPO_ROOT / "bench"
RESULTS_DIR = BENCH_ROOT / "results"


@dataclass(frozen=True)
class Database:
    """The bench's own migrated database; `postmaster_pid` only for the embedded server."""

    url: str
    postmaster_pid: int | None
    embedded: bool


def with_database(server_url: str, name: str) -> str:
    """The URL of database `name` on the server of `server_url`."""
    params = psycopg.conninfo.conninfo_to_dict(server_url)
    params["dbname"] = name
    return as_url(psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items()}))


@contextmanager
def bench_database(*, durable: bool) -> Iterator[Database]:
    """A fresh database: on the server at `DATABASE_URL` if set, else an embedded server.

    The embedded server runs with PostgreSQL's defaults (fsync on) unless `durable` is
    False. Either way the database is gone afterwards.
    """
    server_url = os.environ.get("DATABASE_URL") or None
    if server_url is not None:
        name = f"payments_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = with_database(server_url, name)
        try:
            upgrade_head(url)
            yield Database(url=url, postmaster_pid=None, embedded=False)
        finally:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    # Not under the repository: the server's own user must be able to reach the folder.
    data_dir = Path(tempfile.mkdtemp(prefix="payments-bench-pg-"))
    server = EmbeddedPostgres(data_dir, durable=durable, database="payments_bench")
    try:
        url = server.start()
        upgrade_head(url)
        pid = int((server.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        yield Database(url=url, postmaster_pid=pid, embedded=True)
    finally:
        server.stop(mode="fast")
        shutil.rmtree(data_dir, ignore_errors=True)


def start_provider(log_dir: Path) -> Process:
    """The fake provider with a fresh ledger in `log_dir`."""
    return start_fake_provider(log_dir, log_dir / "provider-ledger.sqlite3")


def start_api(log_dir: Path, env: dict[str, str], *, workers: int) -> Process:
    """`payments serve` with `workers` uvicorn worker processes, ready once /healthz answers.

    Its operators' listener (admin API, console, /metrics) gets a free port of its own, so
    that several benches, or a bench beside `payments dev`, do not collide on 8001.
    """
    port, admin_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_process(
        "api",
        [*PAYMENTS, "serve", "--port", str(port), "--workers", str(workers)],
        env=admin_env(env, admin_port),
        log_dir=log_dir,
        ready_url=f"{url}/healthz",
        url=url,
        timeout=60,
    )
    process.admin_url = f"http://127.0.0.1:{admin_port}"
    return process


def api_env(database_url: str, provider_url: str) -> dict[str, str]:
    """The environment of the bench's API and worker processes (default settings).

    But for the circuit breaker: the reconcile scenarios make their backlog with thousands of
    provider 500s, which would open it and turn the backlog into refused payments.
    """
    return system_env(database_url, provider_url, PAYMENTS_BREAKER_FAILURES="1000000")


def create_tenant(env: dict[str, str], name: str) -> tuple[uuid.UUID, str]:
    """`payments tenant create NAME`; the tenant's id and API key."""
    result = subprocess.run(
        [*PAYMENTS, "tenant", "create", name],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    api_key = result.stdout.strip()
    with psycopg.connect(env["DATABASE_URL"]) as conn:
        row = conn.execute(
            "SELECT tenant_id FROM api_keys WHERE key_hash = %s", (hash_api_key(api_key),)
        ).fetchone()
    assert row is not None
    tenant_id: uuid.UUID = row[0]
    return tenant_id, api_key


@contextmanager
def revision_database(server_url: str, tree: Path, env: dict[str, str]) -> Iterator[str]:
    """A database of its own for `tree`'s revision on the bench's server, migrated by the
    revision's own migrations (revisions of different schemas each run on theirs); dropped
    afterwards."""
    name = f"payments_instructions_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    try:
        tree_cli(tree, {**env, "DATABASE_URL": url}, "migrate")
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def tree_cli(tree: Path, env: dict[str, str], *args: str) -> str:
    """`payments ARGS` as `tree`'s revision has it; its standard output, stripped."""
    run = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if run.returncode != 0:
        sys.exit(f"`payments {' '.join(args)}` of {tree} failed:\n{run.stderr[-2000:]}")
    return run.stdout.strip()
