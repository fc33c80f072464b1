"""All SQL on tenants and their API keys."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row

from app.db.database import Connection
from app.tenants.keys import display_prefix, generate_api_key, hash_api_key
from app.tenants.rows import ApiKeyRow, TenantRow

_KEY_COLUMNS = "id, tenant_id, prefix, created_at, last_used_at, revoked_at"


@dataclass(frozen=True)
class KeyOwner:
    """Who a valid API key speaks for: the tenant, and which of its keys it is."""

    tenant_id: uuid.UUID
    key_id: uuid.UUID
    last_used_at: datetime | None


async def create_tenant(conn: Connection, name: str) -> tuple[TenantRow, str]:
    """Insert a tenant with its first API key; return it and the key (shown this once)."""
    async with conn.cursor(row_factory=class_row(TenantRow)) as cur:
        await cur.execute(
            "INSERT INTO tenants (id, name) VALUES (%s, %s) RETURNING id, name, created_at",
            (uuid.uuid4(), name),
        )
        tenant = await cur.fetchone()
    assert tenant is not None
    _key, api_key = await create_key(conn, tenant.id)
    return tenant, api_key


async def create_key(conn: Connection, tenant_id: uuid.UUID) -> tuple[ApiKeyRow, str]:
    """Add an API key to the tenant; return its row and the key (shown this once)."""
    api_key = generate_api_key()
    async with conn.cursor(row_factory=class_row(ApiKeyRow)) as cur:
        await cur.execute(
            "INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES (%s, %s, %s, %s)"
            f" RETURNING {_KEY_COLUMNS}",
            (uuid.uuid4(), tenant_id, hash_api_key(api_key), display_prefix(api_key)),
        )
        row = await cur.fetchone()
    assert row is not None
    return row, api_key


async def find_tenants(conn: Connection, name_or_id: str) -> list[TenantRow]:
    """The tenants `name_or_id` names: by id when it is a UUID, else by name (maybe several)."""
    param: uuid.UUID | str
    try:
        sql, param = "SELECT id, name, created_at FROM tenants WHERE id = %s", uuid.UUID(name_or_id)
    except ValueError:
        sql = "SELECT id, name, created_at FROM tenants WHERE name = %s ORDER BY created_at"
        param = name_or_id
    async with conn.cursor(row_factory=class_row(TenantRow)) as cur:
        await cur.execute(sql, (param,))
        return await cur.fetchall()


async def list_keys(conn: Connection, tenant_id: uuid.UUID) -> list[ApiKeyRow]:
    """The tenant's keys, oldest first, revoked ones included."""
    async with conn.cursor(row_factory=class_row(ApiKeyRow)) as cur:
        await cur.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant_id = %s ORDER BY created_at",
            (tenant_id,),
        )
        return await cur.fetchall()


async def revoke_key(conn: Connection, key_id_or_key: str, at: datetime) -> ApiKeyRow | None:
    """Revoke the key with this id, or this key itself; None when there is no such key.

    Revoking a revoked key keeps its first revocation time.
    """
    param: uuid.UUID | str
    try:
        where, param = "id = %(key)s", uuid.UUID(key_id_or_key)
    except ValueError:
        where, param = "key_hash = %(key)s", hash_api_key(key_id_or_key)
    async with conn.cursor(row_factory=class_row(ApiKeyRow)) as cur:
        await cur.execute(
            f"UPDATE api_keys SET revoked_at = coalesce(revoked_at, %(at)s) WHERE {where}"
            f" RETURNING {_KEY_COLUMNS}",
            {"key": param, "at": at},
        )
        return await cur.fetchone()


async def lock_tenant(conn: Connection, tenant_id: uuid.UUID) -> None:
    """Lock the tenant's row until the transaction ends, `FOR NO KEY UPDATE`: another lock
    of it waits, while rows referring to the tenant (its payments) are still inserted. A
    per-tenant limit counts under it (the webhook endpoints', `app/webhooks/endpoints.py`)."""
    await conn.execute(
        "SELECT id FROM tenants WHERE id = %(tenant_id)s FOR NO KEY UPDATE",
        {"tenant_id": tenant_id},
    )


async def find_key_owner(conn: Connection, api_key: str) -> KeyOwner | None:
    """Who this API key speaks for, if it is a key in force."""
    cur = await conn.execute(
        "SELECT tenant_id, id, last_used_at FROM api_keys"
        " WHERE key_hash = %s AND revoked_at IS NULL",
        (hash_api_key(api_key),),
    )
    row = await cur.fetchone()
    if row is None:
        return None
    return KeyOwner(tenant_id=row[0], key_id=row[1], last_used_at=row[2])


async def record_use(conn: Connection, key_id: uuid.UUID, at: datetime) -> None:
    """Note that the key was used at `at` (never moving its last use backwards)."""
    await conn.execute(
        "UPDATE api_keys SET last_used_at = %(at)s"
        " WHERE id = %(id)s AND (last_used_at IS NULL OR last_used_at < %(at)s)",
        {"id": key_id, "at": at},
    )
