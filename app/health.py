"""Liveness and readiness."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse

from app.backlog import read_backlog
from app.db.database import Database
from app.dependencies import ServicesDep
from app.errors import ServiceUnavailable
from app.http.problems import problem
from app.observability.metrics import CONTENT_TYPE, Backlog

logger = logging.getLogger("payments.health")

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {CONTENT_TYPE: {}}}},
)
async def metrics(services: ServicesDep) -> Response:
    """Served on the operators' listener only (`app/http/listeners.py`)."""
    try:
        await services.metrics.refresh_backlog_if_stale(functools.partial(read, services.db))
    except Exception:
        # The counters are still worth serving while the database is away.
        logger.warning("metrics: backlog gauges not refreshed", exc_info=True)
    return Response(services.metrics.render(), media_type=CONTENT_TYPE)


async def read(db: Database) -> Backlog:
    async with db.connection() as conn:
        return await read_backlog(conn)


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The database is reachable and its schema is at the newest migration",
    responses={503: problem("SERVICE_UNAVAILABLE: database unreachable or schema not at head")},
)
async def readyz(services: ServicesDep, response: Response) -> dict[str, Any]:
    try:
        async with services.db.connection() as conn:
            row = await (await conn.execute("SELECT version_num FROM alembic_version")).fetchone()
        revision = None if row is None else row[0]
    except Exception as exc:
        raise ServiceUnavailable(f"database unreachable: {type(exc).__name__}") from None
    expected = await schema_head()
    if revision != expected:
        raise ServiceUnavailable(f"schema at {revision}, expected {expected}")
    return {"status": "ready", "schema": revision}


@functools.cache
def _head_revision() -> str | None:
    # Here, not at start: reading it imports Alembic and every migration (~75 ms of CPU),
    # which a process that is never asked `/readyz` does not need.
    from app.db.migrate import head_revision

    return head_revision()


async def schema_head() -> str | None:
    """The newest migration's revision id, read from the migrations the first time it is
    asked (in a thread, off the event loop), then kept for the process's life."""
    return await asyncio.to_thread(_head_revision)
