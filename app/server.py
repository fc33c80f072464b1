"""Running the API under uvicorn."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings


def build_app() -> FastAPI:
    """App factory for uvicorn: each worker process reads the settings itself."""
    return create_app(Settings.from_env())


def serve(settings: Settings, *, host: str, port: int, workers: int = 1) -> None:
    """Serve the API; with `workers` > 1, uvicorn forks worker processes."""
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    if workers > 1:
        uvicorn.run(
            "app.server:build_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            access_log=False,
        )
        return
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", access_log=False)
