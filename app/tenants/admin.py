"""Tenant administration from the command line."""

from __future__ import annotations

import asyncio

from app.db.engine import build_engine, build_sessionmaker, transaction
from app.settings import Settings
from app.tenants.repository import create_tenant


def create_tenant_cli(settings: Settings, name: str) -> str:
    """Create a tenant named `name`; return its new API key."""

    async def run() -> str:
        engine = build_engine(settings, application_name="payments-admin")
        try:
            async with transaction(build_sessionmaker(engine)) as session:
                _tenant, api_key = await create_tenant(session, name)
            return api_key
        finally:
            await engine.dispose()

    return asyncio.run(run())
