"""The baselines: a bare FastAPI endpoint doing one INSERT per request, on two stacks.

- `--stack lean` (the floor the service is measured against): FastAPI with a pydantic body,
  a psycopg 3 connection pool sized to the load, one INSERT per request in autocommit: what
  the service's own stack costs with no protocol at all.
- `--stack orm`: the same endpoint on the first cut's data stack, SQLAlchemy's async ORM
  session on an engine with a pool of 10 plus 10 overflow and one `transaction()` per
  request, kept beside the lean one so the cost of that stack stays visible.

Neither has authentication, idempotency, a provider call or an audit trail, so the distance
between them and `POST /payments` is what those cost.

    python -m bench.baseline_app --port 8200 [--workers N] [--stack lean|orm]
    (DATABASE_URL required)
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from app.db.database import open_database
from app.db.migrate import sqlalchemy_url
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

_INSERT_PARAMS = "(id, reference, amount_minor, currency, account_id)"
_INSERT_SQL = (
    f"INSERT INTO bench_baseline_inserts {_INSERT_PARAMS} VALUES "
    "(%(id)s, %(reference)s, %(amount_minor)s, %(currency)s, %(account_id)s) RETURNING created_at"
)
_INSERT_ORM = text(
    f"INSERT INTO bench_baseline_inserts {_INSERT_PARAMS} VALUES "
    "(:id, :reference, :amount_minor, :currency, :account_id) RETURNING created_at"
)
STACK_ENV = "BENCH_BASELINE_STACK"

Insert = Callable[[dict[str, object]], Awaitable[datetime]]


class InsertRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: Annotated[str, Field(min_length=1, max_length=128)]
    amount_minor: Annotated[int, Field(gt=0)]
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
    account_id: Annotated[str, Field(min_length=1, max_length=64)]


class InsertResponse(BaseModel):
    id: uuid.UUID
    created_at: str


@asynccontextmanager
async def _lean(settings: Settings) -> AsyncIterator[Insert]:
    async with open_database(settings, application_name="payments-bench-lean") as db:

        async def insert(values: dict[str, object]) -> datetime:
            async with db.connection() as conn:
                row = await (await conn.execute(_INSERT_SQL, values)).fetchone()
            assert row is not None
            created: datetime = row[0]
            return created

        yield insert


@asynccontextmanager
async def _orm(settings: Settings) -> AsyncIterator[Insert]:
    assert settings.database_url is not None
    engine = create_async_engine(
        sqlalchemy_url(settings.database_url), pool_size=10, max_overflow=10, pool_timeout=10
    )
    sessions = async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
    try:

        async def insert(values: dict[str, object]) -> datetime:
            async with sessions() as session, session.begin():
                created: datetime = (await session.execute(_INSERT_ORM, values)).one()[0]
            return created

        yield insert
    finally:
        await engine.dispose()


def create_app() -> FastAPI:
    """The baseline app; settings (DATABASE_URL) and the stack come from the environment."""
    settings = Settings.from_env()
    stack = _lean if os.environ.get(STACK_ENV, "lean") == "lean" else _orm
    inserts: list[Insert] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with stack(settings) as insert:
            inserts.append(insert)
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/inserts", status_code=201)
    async def insert(body: InsertRequest) -> InsertResponse:
        row_id = uuid.uuid4()
        created = await inserts[0]({"id": row_id, **body.model_dump()})
        return InsertResponse(id=row_id, created_at=created.isoformat())

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--stack", choices=("lean", "orm"), default="lean")
    args = parser.parse_args(argv)
    os.environ[STACK_ENV] = args.stack
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
