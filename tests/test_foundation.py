"""Schema, settings, command line and the OpenAPI description."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from psycopg.rows import DictRow

from app.db.migrate import sync_engine
from app.partitions.layout import is_partition
from app.settings import Settings, SettingsError
from app.tables import Base
from tests.support.control.processes import REPO_ROOT, Process


def _not_a_partition(name: str | None, kind: str, _parents: object) -> bool:
    # The models declare a partitioned table once; its partitions are the calendar's.
    return not (kind == "table" and name is not None and is_partition(name))


def test_migrations_and_models_agree(database_url: str) -> None:
    engine = sync_engine(database_url)
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "include_name": _not_a_partition}
        )
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == []


def test_scoped_key_is_unique_in_the_key_table_alone(db: psycopg.Connection[DictRow]) -> None:
    # The key table's primary key decides the claim; `operations`, partitioned by day, has
    # no unique key on the idempotency key (it would have to hold the day).
    rows = db.execute(
        "SELECT conrelid::regclass::text AS tbl, pg_get_constraintdef(oid) AS def"
        " FROM pg_constraint WHERE contype IN ('p', 'u')"
        " AND conrelid IN ('idempotency_keys'::regclass, 'operations'::regclass)"
        " ORDER BY 1"
    ).fetchall()
    assert rows == [
        {
            "tbl": "idempotency_keys",
            "def": "PRIMARY KEY (tenant_id, operation_name, idempotency_key)",
        },
        {"tbl": "operations", "def": "PRIMARY KEY (id, created_at)"},
    ]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PAYMENTS_LEASE_S": "5", "PAYMENTS_PROVIDER_TIMEOUT_S": "5"}, "PAYMENTS_LEASE_S"),
        ({"PAYMENTS_PROVIDER_TIMEOUT_S": "-1"}, "PAYMENTS_PROVIDER_TIMEOUT_S"),
        ({"PAYMENTS_MAX_ATTEMPTS": "many"}, "PAYMENTS_MAX_ATTEMPTS"),
        ({"DATABASE_URL": "mysql://x"}, "DATABASE_URL"),
        ({"PAYMENTS_PROVIDER_URL": "ftp://x"}, "PAYMENTS_PROVIDER_URL"),
        ({"PAYMENTS_FAILPOINTS": "after_claim"}, "PAYMENTS_FAILPOINTS"),
    ],
)
def test_invalid_settings_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=named):
        Settings.from_env()


def test_invalid_settings_stop_a_process_at_start() -> None:
    env = {**os.environ, "PAYMENTS_LEASE_S": "1", "PAYMENTS_PROVIDER_TIMEOUT_S": "5"}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "PAYMENTS_LEASE_S" in result.stderr


def test_tenant_create_prints_only_a_working_api_key(api: Process, database_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "tenant", "create", "acme"],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    api_key = result.stdout.strip()
    assert api_key.startswith("sk_")
    assert "\n" not in api_key
    response = httpx.get(
        f"{api.url}/operations",
        params={"idempotency_key": "none-yet"},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 404
    assert response.json()["code"] == "NOT_FOUND"


def test_api_keys_are_stored_hashed(db: psycopg.Connection[DictRow], api_key_tenant: str) -> None:
    rows = db.execute("SELECT key_hash, prefix FROM api_keys").fetchall()
    assert rows
    assert all(api_key_tenant not in row["key_hash"] for row in rows)
    assert all(len(row["key_hash"]) == 64 for row in rows)
    assert all(len(row["prefix"]) <= 12 for row in rows)


@pytest.fixture
def api_key_tenant(client: httpx.Client) -> str:
    return str(client.headers["authorization"]).removeprefix("Bearer ")


def test_health_and_readiness(api: Process) -> None:
    assert httpx.get(f"{api.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{api.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_openapi_describes_every_endpoint_header_and_error(api: Process) -> None:
    document = httpx.get(f"{api.url}/openapi.json").json()
    paths = document["paths"]
    assert set(paths) >= {
        "/payments",
        "/payments/{payment_id}",
        "/operations/{operation_id}",
        "/operations",
        "/healthz",
        "/readyz",
    }
    create = paths["/payments"]["post"]
    headers = {p["name"] for p in create["parameters"] if p["in"] == "header"}
    assert headers >= {"Idempotency-Key", "Prefer"}
    assert set(create["responses"]) >= {
        "201",
        "202",
        "400",
        "401",
        "402",
        "409",
        "413",
        "415",
        "422",
        "502",
        "503",
    }
    # The tenant's API key: a bearer scheme, on every tenant route.
    assert document["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "The tenant's API key",
    }
    for path, method in (("/payments", "post"), ("/payments/{payment_id}", "get")):
        assert paths[path][method]["security"] == [{"HTTPBearer": []}]
    schema = create["requestBody"]["content"]["application/json"]["schema"]
    assert set(schema["properties"]) == {
        "amount",
        "currency",
        "account_id",
        "merchant_reference",
        "description",
        "metadata",
        "capture",
    }
    assert schema["additionalProperties"] is False
    description = " ".join(r["description"] for r in create["responses"].values())
    for code in (
        "IDEMPOTENCY_KEY_MISSING",
        "IDEMPOTENCY_KEY_INVALID",
        "IDEMPOTENCY_KEY_REUSED",
        "IDEMPOTENCY_KEY_EXPIRED",
        "IDEMPOTENCY_REQUEST_IN_PROGRESS",
        "VALIDATION_ERROR",
        "PAYLOAD_TOO_LARGE",
        "UNSUPPORTED_MEDIA_TYPE",
        "PROVIDER_REJECTED",
        "PROVIDER_UNAVAILABLE",
        "UNAUTHENTICATED",
    ):
        assert code in description, code
    for path in ("/payments/{payment_id}", "/operations/{operation_id}", "/operations"):
        assert {"401", "404"} <= set(paths[path]["get"]["responses"])
