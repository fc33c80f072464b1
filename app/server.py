"""Running the API under uvicorn."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from app.main import create_app
from app.observability.logging import configure_logging
from app.settings import Settings


def build_app() -> FastAPI:
    """App factory for uvicorn: each worker process reads the settings itself."""
    configure_logging()
    return create_app(Settings.from_env())


def serve(settings: Settings, *, host: str, port: int, workers: int = 1) -> None:
    """Serve the API; with `workers` > 1, uvicorn forks worker processes."""
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    configure_logging()
    if workers > 1:
        uvicorn.run(
            "app.server:build_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            access_log=False,
            log_config=None,
        )
        return
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        log_config=None,
    )
