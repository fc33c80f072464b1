"""Tenants and API keys from the command line, and the API's key cache wiring."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.engine import SessionMaker, build_engine, build_sessionmaker, transaction
from app.settings import Settings
from app.tenants import repository
from app.tenants.cache import ApiKeyCache
from app.tenants.models import ApiKey, Tenant
from app.tenants.repository import KeyOwner

T = TypeVar("T")


class TenantCommandError(Exception):
    """A tenant or key command cannot be carried out; the message says why."""


def api_key_cache(sessions: SessionMaker) -> ApiKeyCache:
    """The API's key cache, looking keys up and recording their use in short transactions."""

    async def lookup(api_key: str) -> KeyOwner | None:
        async with transaction(sessions) as session:
            return await repository.find_key_owner(session, api_key)

    async def record_use(key_id: uuid.UUID, at: datetime) -> None:
        async with transaction(sessions) as session:
            await repository.record_use(session, key_id, at)

    return ApiKeyCache(lookup=lookup, record_use=record_use)


def _in_transaction(settings: Settings, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    async def run() -> T:
        engine = build_engine(settings, application_name="payments-admin")
        try:
            async with transaction(build_sessionmaker(engine)) as session:
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(run())


async def _one_tenant(session: AsyncSession, name_or_id: str) -> Tenant:
    tenants = await repository.find_tenants(session, name_or_id)
    if not tenants:
        raise TenantCommandError(f"no tenant named {name_or_id!r}")
    if len(tenants) > 1:
        ids = ", ".join(str(t.id) for t in tenants)
        raise TenantCommandError(f"several tenants are named {name_or_id!r}; use an id: {ids}")
    return tenants[0]


def create_tenant_cli(settings: Settings, name: str) -> str:
    """Create a tenant named `name`; return its new API key."""

    async def work(session: AsyncSession) -> str:
        _tenant, api_key = await repository.create_tenant(session, name)
        return api_key

    return _in_transaction(settings, work)


def create_key_cli(settings: Settings, tenant: str) -> tuple[ApiKey, str]:
    """Add a key to the tenant with this name or id; its row and the key."""

    async def work(session: AsyncSession) -> tuple[ApiKey, str]:
        owner = await _one_tenant(session, tenant)
        return await repository.create_key(session, owner.id)

    return _in_transaction(settings, work)


def list_keys_cli(settings: Settings, tenant: str) -> list[ApiKey]:
    """The keys of the tenant with this name or id, oldest first."""

    async def work(session: AsyncSession) -> list[ApiKey]:
        owner = await _one_tenant(session, tenant)
        return await repository.list_keys(session, owner.id)

    return _in_transaction(settings, work)


def revoke_key_cli(settings: Settings, key: str) -> ApiKey:
    """Revoke the key with this id, or this key itself."""

    async def work(session: AsyncSession) -> ApiKey:
        row = await repository.revoke_key(session, key, utcnow())
        if row is None:
            raise TenantCommandError("no such API key")
        return row

    return _in_transaction(settings, work)
