"""The baseline: a bare FastAPI endpoint on the service's own stack, one INSERT per request.

Same stack as the API: uvicorn, FastAPI with a pydantic body, SQLAlchemy async on psycopg,
and the very engine settings the service uses (`app.db.engine.build_engine`: pool, pre-ping,
server-side timeouts) with one `transaction()` per request. It has no authentication, no
idempotency, no provider call and no audit trail, so the distance between it and
`POST /payments` is what those cost.

    python -m bench.baseline_app --port 8200 [--workers N]      (DATABASE_URL required)
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

from app.db.engine import SessionMaker, build_engine, build_sessionmaker, transaction
from app.settings import Settings

TABLE_DDL = """
CREATE TABLE IF NOT EXISTS bench_baseline_inserts (
    id uuid PRIMARY KEY,
    reference varchar(128) NOT NULL,
    amount_minor bigint NOT NULL,
    currency varchar(3) NOT NULL,
    account_id varchar(64) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""

_INSERT = text(
    "INSERT INTO bench_baseline_inserts (id, reference, amount_minor, currency, account_id) "
    "VALUES (:id, :reference, :amount_minor, :currency, :account_id) RETURNING created_at"
)


class InsertRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: Annotated[str, Field(min_length=1, max_length=128)]
    amount_minor: Annotated[int, Field(gt=0)]
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
    account_id: Annotated[str, Field(min_length=1, max_length=64)]


class InsertResponse(BaseModel):
    id: uuid.UUID
    created_at: str


def create_app() -> FastAPI:
    """The baseline app; settings (DATABASE_URL) come from the environment at start."""
    settings = Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = build_engine(settings, application_name="payments-bench-baseline")
        app.state.sessions = build_sessionmaker(engine)
        try:
            yield
        finally:
            await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/inserts", status_code=201)
    async def insert(body: InsertRequest, request: Request) -> InsertResponse:
        sessions: SessionMaker = request.app.state.sessions
        row_id = uuid.uuid4()
        async with transaction(sessions) as session:
            created = (await session.execute(_INSERT, {"id": row_id, **body.model_dump()})).one()
        return InsertResponse(id=row_id, created_at=created[0].isoformat())

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8200)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    uvicorn.run(
        "bench.baseline_app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level="warning",
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
