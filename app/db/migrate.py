"""Apply Alembic migrations from code (used by `payments migrate`, `payments dev`, tests)."""

from __future__ import annotations

from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, pool

from app.db.database import conninfo

REPO_ROOT = Path(__file__).resolve().parents[2]


def sqlalchemy_url(database_url: str) -> str:
    """The SQLAlchemy URL for a single-host `postgresql://` URL, on the psycopg 3 driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg://" + database_url.removeprefix(prefix)
    raise ValueError("DATABASE_URL must be a postgresql:// URL")


def sync_engine(database_url: str) -> Engine:
    """A SQLAlchemy engine (psycopg 3, no pooling) on `database_url`, for Alembic.

    SQLAlchemy's URL parser does not take libpq's multi-host form
    (`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`), so the engine
    does not parse the URL at all: libpq gets it as it is, through a `creator`, and picks
    the host that accepts writes, as the runtime's pool does.
    """
    if not database_url.startswith(("postgresql+psycopg://", "postgresql://", "postgres://")):
        raise ValueError("DATABASE_URL must be a postgresql:// URL")
    libpq = conninfo(database_url)

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(libpq)

    return create_engine("postgresql+psycopg://", creator=connect, poolclass=pool.NullPool)


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the project's migrations and `database_url`."""
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    config.attributes["configure_logging"] = False
    return config


def upgrade_head(database_url: str) -> None:
    """Bring the schema at `database_url` to the newest migration."""
    command.upgrade(alembic_config(database_url), "head")


def head_revision() -> str | None:
    """The newest migration's revision id."""
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused"))
    return script.get_current_head()


def current_revision(database_url: str) -> str | None:
    """The revision the database at `database_url` is at."""
    engine = sync_engine(database_url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
