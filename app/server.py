"""Running the API under uvicorn, on uvloop's event loop and httptools' HTTP parser.

Both are C implementations of what uvicorn otherwise does in Python (asyncio's loop, h11);
measured, they take a large share off the API's CPU per request.
"""

from __future__ import annotations

from typing import Any

import uvicorn
from fastapi import FastAPI

from app.main import create_app
from app.observability.logging import configure_logging
from app.settings import Settings

# How every API process is served (the profiler in bench/ serves the same way).
SERVER_OPTIONS: dict[str, Any] = {
    "log_level": "warning",
    "access_log": False,
    "log_config": None,
    "loop": "uvloop",
    "http": "httptools",
}


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
            **SERVER_OPTIONS,
        )
        return
    uvicorn.run(create_app(settings), host=host, port=port, **SERVER_OPTIONS)
