"""Tenants and API keys from the command line, and the API's key cache wiring."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from psycopg import AsyncConnection

from app.clock import utcnow
from app.db.database import Connection, Database, conninfo
from app.settings import Settings
from app.tenants import repository
from app.tenants.cache import ApiKeyCache
from app.tenants.repository import KeyOwner
from app.tenants.rows import ApiKeyRow, TenantRow
from app.tracing.spans import outside_traces

T = TypeVar("T")


class TenantCommandError(Exception):
    """A tenant or key command cannot be carried out; the message says why."""


def api_key_cache(db: Database, *, max_entries: int = 10_000) -> ApiKeyCache:
    """The API's key cache, looking keys up and recording their use, a statement each;
    `max_entries` valid keys remembered (`PAYMENTS_API_KEY_CACHE_SIZE`)."""

    async def lookup(api_key: str) -> KeyOwner | None:
        # Not traced: a made-up key's request is refused untraced, its lookup included.
        with outside_traces():
            async with db.connection() as conn:
                return await repository.find_key_owner(conn, api_key)

    async def record_use(key_id: uuid.UUID, at: datetime) -> None:
        async with db.connection() as conn:
            await repository.record_use(conn, key_id, at)

    return ApiKeyCache(lookup=lookup, record_use=record_use, max_entries=max_entries)


def _in_transaction(settings: Settings, work: Callable[[Connection], Awaitable[T]]) -> T:
    """Run `work` in one transaction on a connection of its own (a command's whole life)."""
    if settings.database_url is None:
        raise TenantCommandError("DATABASE_URL is not set")
    url = conninfo(settings.database_url)

    async def run() -> T:
        conn = await AsyncConnection.connect(
            url, autocommit=True, application_name="payments-admin"
        )
        async with conn, conn.transaction():
            return await work(conn)

    return asyncio.run(run())


async def _one_tenant(conn: Connection, name_or_id: str) -> TenantRow:
    tenants = await repository.find_tenants(conn, name_or_id)
    if not tenants:
        raise TenantCommandError(f"no tenant named {name_or_id!r}")
    if len(tenants) > 1:
        ids = ", ".join(str(t.id) for t in tenants)
        raise TenantCommandError(f"several tenants are named {name_or_id!r}; use an id: {ids}")
    return tenants[0]


def create_tenant_cli(settings: Settings, name: str) -> str:
    """Create a tenant named `name`; return its new API key."""

    async def work(conn: Connection) -> str:
        _tenant, api_key = await repository.create_tenant(conn, name)
        return api_key

    return _in_transaction(settings, work)


def create_key_cli(settings: Settings, tenant: str) -> tuple[ApiKeyRow, str]:
    """Add a key to the tenant with this name or id; its row and the key."""

    async def work(conn: Connection) -> tuple[ApiKeyRow, str]:
        owner = await _one_tenant(conn, tenant)
        return await repository.create_key(conn, owner.id)

    return _in_transaction(settings, work)


def list_keys_cli(settings: Settings, tenant: str) -> list[ApiKeyRow]:
    """The keys of the tenant with this name or id, oldest first."""

    async def work(conn: Connection) -> list[ApiKeyRow]:
        owner = await _one_tenant(conn, tenant)
        return await repository.list_keys(conn, owner.id)

    return _in_transaction(settings, work)


def revoke_key_cli(settings: Settings, key: str) -> ApiKeyRow:
    """Revoke the key with this id, or this key itself."""

    async def work(conn: Connection) -> ApiKeyRow:
        row = await repository.revoke_key(conn, key, utcnow())
        if row is None:
            raise TenantCommandError("no such API key")
        return row

    return _in_transaction(settings, work)
