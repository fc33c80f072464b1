"""Several API keys per tenant, made, listed and revoked with `payments tenant key`."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import httpx
import psycopg
from alembic import command
from psycopg.rows import DictRow, dict_row

from app.db.migrate import alembic_config
from app.tenants.keys import generate_api_key, hash_api_key
from tests.support.control.processes import REPO_ROOT, Process
from tests.support.control.waiting import wait_until


def payments(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def status_with(api: Process, api_key: str) -> int:
    response = httpx.get(
        f"{api.url}/operations",
        params={"idempotency_key": "nothing-here"},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=10,
    )
    return response.status_code  # 404: authenticated (no such operation); 401: not


def key_rows(listing: str) -> dict[str, list[str]]:
    """`tenant key list` output: each key's columns, by id."""
    rows = [line.split() for line in listing.splitlines()[1:]]
    return {row[0]: row[1:] for row in rows}


def test_two_keys_work_and_a_revoked_one_stops_within_5_s(api: Process, database_url: str) -> None:
    name = f"rotating-{uuid.uuid4().hex[:8]}"
    first = ok(payments(database_url, "tenant", "create", name)).strip()
    created = payments(database_url, "tenant", "key", "create", name)
    second = ok(created).splitlines()[-1]
    assert second.startswith("sk_")
    assert second != first
    assert status_with(api, first) == 404
    assert status_with(api, second) == 404

    revoked = ok(payments(database_url, "tenant", "key", "revoke", first))
    assert "revoked key" in revoked

    wait_until(lambda: status_with(api, first) == 401, timeout=5.0, message="first key refused")
    assert status_with(api, second) == 404

    listing = key_rows(ok(payments(database_url, "tenant", "key", "list", name)))
    assert len(listing) == 2
    by_prefix = {columns[0]: columns for columns in listing.values()}
    first_row, second_row = by_prefix[first[:12]], by_prefix[second[:12]]
    # Columns: prefix, created, last used, revoked. Both were used; only the first revoked.
    assert (first_row[2] != "-", first_row[3] != "-") == (True, True)
    assert (second_row[2] != "-", second_row[3] != "-") == (True, False)


def test_a_key_is_revoked_by_its_id_and_the_tenant_found_by_id(
    api: Process, database_url: str, db: psycopg.Connection[DictRow]
) -> None:
    api_key = ok(payments(database_url, "tenant", "create", "by-id")).strip()
    row = db.execute(
        "SELECT id, tenant_id FROM api_keys WHERE key_hash = %s", (hash_api_key(api_key),)
    ).fetchone()
    assert row is not None
    assert status_with(api, api_key) == 404

    listing = key_rows(ok(payments(database_url, "tenant", "key", "list", str(row["tenant_id"]))))
    assert list(listing) == [str(row["id"])]
    ok(payments(database_url, "tenant", "key", "revoke", str(row["id"])))

    wait_until(lambda: status_with(api, api_key) == 401, timeout=5.0, message="key refused")


def test_unknown_tenants_and_keys_are_errors(database_url: str) -> None:
    missing = payments(database_url, "tenant", "key", "create", f"nobody-{uuid.uuid4()}")
    assert missing.returncode == 1
    assert "no tenant named" in missing.stderr
    assert missing.stdout == ""
    assert payments(database_url, "tenant", "key", "revoke", "sk_nope").returncode == 1


def test_a_name_held_by_two_tenants_asks_for_an_id(database_url: str) -> None:
    name = f"twin-{uuid.uuid4().hex[:8]}"
    ok(payments(database_url, "tenant", "create", name))
    ok(payments(database_url, "tenant", "create", name))

    result = payments(database_url, "tenant", "key", "create", name)

    assert result.returncode == 1
    assert "use an id" in result.stderr


def test_the_migration_keeps_every_existing_key(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0002")
    api_key, tenant_id = generate_api_key(), uuid.uuid4()
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenants (id, name, api_key_hash) VALUES (%s, 'old', %s)",
            (tenant_id, hash_api_key(api_key)),
        )

    command.upgrade(config, "head")

    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT tenant_id, key_hash, revoked_at FROM api_keys").fetchall()
    assert rows == [{"tenant_id": tenant_id, "key_hash": hash_api_key(api_key), "revoked_at": None}]
    command.downgrade(config, "0002")
    with psycopg.connect(scratch_database) as conn:
        assert conn.execute("SELECT api_key_hash FROM tenants").fetchall() == [
            (hash_api_key(api_key),)
        ]
