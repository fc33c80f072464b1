"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from sqlalchemy import text

from app.db.engine import transaction
from app.dependencies import ServicesDep
from app.errors import ServiceUnavailable

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The database is reachable and its schema is at the newest migration",
    responses={503: {"description": "SERVICE_UNAVAILABLE: not ready"}},
)
async def readyz(services: ServicesDep, response: Response) -> dict[str, Any]:
    try:
        async with transaction(services.sessions) as session:
            revision = (
                await session.execute(text("SELECT version_num FROM alembic_version"))
            ).scalar_one_or_none()
    except Exception as exc:
        raise ServiceUnavailable(f"database unreachable: {type(exc).__name__}") from None
    expected = services.schema_head
    if revision != expected:
        raise ServiceUnavailable(f"schema at {revision}, expected {expected}")
    return {"status": "ready", "schema": revision}
