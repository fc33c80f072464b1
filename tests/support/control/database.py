"""The test database: a throwaway embedded PostgreSQL, or a fresh database on DATABASE_URL."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade_head


def _with_database(url: str, database: str) -> str:
    params = conninfo_to_dict(url)
    params["dbname"] = database
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


def as_url(conninfo: str) -> str:
    """A `postgresql://` URL for a libpq conninfo string (several hosts kept, in order)."""
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    user = params.pop("user", "postgres")
    password = params.pop("password", None)
    auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    hosts = params.pop("host", "127.0.0.1").split(",")
    ports = params.pop("port", "5432").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    netloc = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))
    database = params.pop("dbname")
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{auth}@{netloc}/{quote(database, safe='')}{query}"


@contextmanager
def throwaway_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database on the server at `server_url` (named `prefix` and a random
    suffix), its URL; dropped afterwards, whoever is still connected."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield as_url(_with_database(server_url, name))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def test_database(server_url: str | None, work_dir: Path) -> Iterator[str]:
    """A migrated, empty database for one test session; gone afterwards."""
    if server_url is None:
        # Not under pytest's temp folder: pytest makes that private to root (0700) whenever
        # a session starts, which would lock the server's own user out of its data.
        data_dir = Path(tempfile.mkdtemp(prefix="payments-test-pg-"))
        server = EmbeddedPostgres(data_dir, durable=False, database="payments_test")
        url = server.start()
        try:
            upgrade_head(url)
            yield url
        finally:
            server.stop(mode="immediate")
            shutil.rmtree(data_dir, ignore_errors=True)
        return
    with throwaway_database(server_url, "payments_test") as url:
        upgrade_head(url)
        yield url
