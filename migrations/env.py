"""Alembic environment: runs migrations on a synchronous psycopg connection."""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context

from app.db.migrate import sync_engine
from app.tables import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("DATABASE_URL is not set")
    return str(url)


def run_migrations_offline() -> None:
    # Offline mode renders SQL for a single server; only the dialect matters here.
    context.configure(
        url="postgresql+psycopg://", target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = sync_engine(_url())
    with engine.connect() as connection:
        # Serialize concurrent `migrate` runs (several processes starting at once). The lock
        # is the session's: committed at once, so that the migrations' transaction is
        # Alembic's own, which a migration's autocommit block (0028's batches) needs.
        connection.exec_driver_sql("SELECT pg_advisory_lock(7420031)")
        connection.commit()
        try:
            context.configure(connection=connection, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            connection.exec_driver_sql("SELECT pg_advisory_unlock(7420031)")
            connection.commit()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
