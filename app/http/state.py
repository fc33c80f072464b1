"""What the lifespan built, as a route's dependency.

The application's services live on `app.state.services` (built by `app/main.py`, typed as
`app.dependencies.Services`). A router below the edge does not import that class: it
annotates this dependency with a `Protocol` of the few services it uses, and mypy checks
in `app/dependencies.py` that `Services` provides every router's protocol.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request


async def get_services(request: Request) -> Any:
    # async: FastAPI runs a plain `def` dependency on a worker thread, per request.
    return request.app.state.services
