"""Liveness and readiness.

`/readyz` says whether the database answered and its schema was at the newest migration
when last checked: the answer comes from a check started at most `CHECK_INTERVAL_S` (1 s)
before the call, one check shared by every caller meanwhile, concurrent ones included
(`Readiness`). So however often it is probed, on either listener, readiness costs a process
at most one pooled connection and one statement a second; a database that goes away is
seen within a second (plus the check's own connect timeout).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from app.backlog import read_backlog
from app.db.database import Database
from app.dependencies import ServicesDep
from app.errors import ServiceUnavailable
from app.http.problems import problem
from app.observability.metrics import CONTENT_TYPE, Backlog

logger = logging.getLogger("payments.health")

# How old a readiness check `/readyz` may answer from.
CHECK_INTERVAL_S = 1.0

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
async def readyz(request: Request) -> dict[str, Any]:
    readiness: Readiness = request.app.state.readiness
    checked = await readiness.check()
    if checked.problem is not None:
        raise ServiceUnavailable(checked.problem)
    return {"status": "ready", "schema": checked.revision}


@dataclass(frozen=True)
class Checked:
    """What one readiness check found: the schema's revision, or what is wrong."""

    started: float
    revision: str | None
    problem: str | None


class Readiness:
    """The database check behind `/readyz`, run at most every `interval_s` and shared."""

    def __init__(
        self,
        db: Database,
        *,
        interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._interval_s = interval_s
        self._clock = clock
        self._last: Checked | None = None
        self._lock = asyncio.Lock()

    async def check(self) -> Checked:
        """A check started at most `interval_s` before this call (or since it began)."""
        arrived = self._clock()
        async with self._lock:
            last = self._last
            if last is not None and last.started >= arrived - self._interval_s:
                return last
            self._last = checked = await self._run()
            return checked

    async def _run(self) -> Checked:
        started = self._clock()
        try:
            async with self._db.connection() as conn:
                cursor = await conn.execute("SELECT version_num FROM alembic_version")
                row = await cursor.fetchone()
            revision = None if row is None else row[0]
        except Exception as exc:
            return Checked(started, None, f"database unreachable: {type(exc).__name__}")
        expected = await schema_head()
        if revision != expected:
            return Checked(started, revision, f"schema at {revision}, expected {expected}")
        return Checked(started, revision, None)


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
