"""All SQL on tenants and their API keys."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.tenants.keys import display_prefix, generate_api_key, hash_api_key
from app.tenants.models import ApiKey, Tenant


@dataclass(frozen=True)
class KeyOwner:
    """Who a valid API key speaks for: the tenant, and which of its keys it is."""

    tenant_id: uuid.UUID
    key_id: uuid.UUID
    last_used_at: datetime | None


async def create_tenant(session: AsyncSession, name: str) -> tuple[Tenant, str]:
    """Insert a tenant with its first API key; return it and the key (shown this once)."""
    tenant = Tenant(id=uuid.uuid4(), name=name)
    session.add(tenant)
    await session.flush()
    _key, api_key = await create_key(session, tenant.id)
    return tenant, api_key


async def create_key(session: AsyncSession, tenant_id: uuid.UUID) -> tuple[ApiKey, str]:
    """Add an API key to the tenant; return its row and the key (shown this once)."""
    api_key = generate_api_key()
    row = ApiKey(
        id=uuid.uuid4(),
        tenant_id=tenant_id,
        key_hash=hash_api_key(api_key),
        prefix=display_prefix(api_key),
    )
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row, api_key


async def find_tenants(session: AsyncSession, name_or_id: str) -> list[Tenant]:
    """The tenants `name_or_id` names: by id when it is a UUID, else by name (maybe several)."""
    try:
        tenant_id = uuid.UUID(name_or_id)
    except ValueError:
        stmt = select(Tenant).where(Tenant.name == name_or_id).order_by(Tenant.created_at)
    else:
        stmt = select(Tenant).where(Tenant.id == tenant_id)
    return list((await session.execute(stmt)).scalars())


async def list_keys(session: AsyncSession, tenant_id: uuid.UUID) -> list[ApiKey]:
    """The tenant's keys, oldest first, revoked ones included."""
    stmt = select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.created_at)
    return list((await session.execute(stmt)).scalars())


async def revoke_key(session: AsyncSession, key_id_or_key: str, at: datetime) -> ApiKey | None:
    """Revoke the key with this id, or this key itself; None when there is no such key.

    Revoking a revoked key keeps its first revocation time.
    """
    try:
        condition = ApiKey.id == uuid.UUID(key_id_or_key)
    except ValueError:
        condition = ApiKey.key_hash == hash_api_key(key_id_or_key)
    row = (await session.execute(select(ApiKey).where(condition))).scalar_one_or_none()
    if row is not None and row.revoked_at is None:
        row.revoked_at = at
        await session.flush()
    return row


async def find_key_owner(session: AsyncSession, api_key: str) -> KeyOwner | None:
    """Who this API key speaks for, if it is a key in force."""
    stmt = select(ApiKey.tenant_id, ApiKey.id, ApiKey.last_used_at).where(
        ApiKey.key_hash == hash_api_key(api_key), ApiKey.revoked_at.is_(None)
    )
    row = (await session.execute(stmt)).one_or_none()
    if row is None:
        return None
    return KeyOwner(tenant_id=row[0], key_id=row[1], last_used_at=row[2])


async def record_use(session: AsyncSession, key_id: uuid.UUID, at: datetime) -> None:
    """Note that the key was used at `at` (never moving its last use backwards)."""
    await session.execute(
        update(ApiKey)
        .where(ApiKey.id == key_id)
        .where((ApiKey.last_used_at.is_(None)) | (ApiKey.last_used_at < at))
        .values(last_used_at=at)
    )
