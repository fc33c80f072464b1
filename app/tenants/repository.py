"""All SQL on tenants."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.tenants.keys import generate_api_key, hash_api_key
from app.tenants.models import Tenant


async def create_tenant(session: AsyncSession, name: str) -> tuple[Tenant, str]:
    """Insert a tenant; return it and its API key (the only time the key exists in clear)."""
    api_key = generate_api_key()
    tenant = Tenant(id=uuid.uuid4(), name=name, api_key_hash=hash_api_key(api_key))
    session.add(tenant)
    await session.flush()
    return tenant, api_key


async def find_by_api_key(session: AsyncSession, api_key: str) -> Tenant | None:
    """The tenant this API key belongs to, if any."""
    stmt = select(Tenant).where(Tenant.api_key_hash == hash_api_key(api_key))
    return (await session.execute(stmt)).scalar_one_or_none()
