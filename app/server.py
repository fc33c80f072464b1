"""Running the API under uvicorn, on uvloop's event loop and httptools' HTTP parser.

Both are C implementations of what uvicorn otherwise does in Python (asyncio's loop, h11);
measured, they take a large share off the API's CPU per request.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from app.main import serving_app
from app.observability.logging import configure_logging
from app.observability.metrics import MULTIPROC_DIR_VARIABLE
from app.settings import Settings

# How every API process is served (the profiler in bench/ serves the same way).
SERVER_OPTIONS: dict[str, Any] = {
    "log_level": "warning",
    "access_log": False,
    "log_config": None,
    "loop": "uvloop",
    "http": "httptools",
}


def build_app() -> ASGIApp:
    """App factory for uvicorn: each worker process reads the settings itself."""
    configure_logging()
    return serving_app(Settings.from_env())


def serve(settings: Settings, *, host: str, port: int, workers: int = 1) -> None:
    """Serve the API; with `workers` > 1, uvicorn forks worker processes."""
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    configure_logging()
    if workers > 1:
        made = _metrics_folder()
        try:
            uvicorn.run(
                "app.server:build_app",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                **SERVER_OPTIONS,
            )
        finally:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        return
    uvicorn.run(serving_app(settings), host=host, port=port, **SERVER_OPTIONS)


def _metrics_folder() -> Path | None:
    """Give the worker processes a shared, empty metrics folder; the one made, if any.

    Each worker process writes its metric values there and `/metrics` adds them up
    (`app/observability/metrics.py`). An operator's `PROMETHEUS_MULTIPROC_DIR` is used and
    emptied (values of an earlier run must not be counted again); without one, a fresh
    folder is made and removed when the server stops. Set before uvicorn starts the
    workers, which read it when they import prometheus_client.
    """
    configured = os.environ.get(MULTIPROC_DIR_VARIABLE)
    if configured:
        folder = Path(configured)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):
            stale.unlink()
        return None
    made = Path(tempfile.mkdtemp(prefix="payments-metrics-"))
    os.environ[MULTIPROC_DIR_VARIABLE] = str(made)
    return made
