"""Per-request observation: latency by route and status, and one JSON log line."""

from __future__ import annotations

import logging
import time

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logging import new_context
from app.observability.metrics import Metrics

logger = logging.getLogger("payments.http")


def _route_template(scope: Scope) -> str:
    # Label by the route's template, never the raw path: ids would explode the label set.
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    for candidate in getattr(getattr(app, "router", None), "routes", []):
        match, _ = candidate.matches(scope)
        if match is Match.FULL:
            return str(candidate.path)
    return "unmatched"


class ObserveRequests:
    """ASGI middleware recording request latency and logging each request."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        context = new_context()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            elapsed = time.perf_counter() - started
            route = _route_template(scope)
            method = scope["method"]
            self.metrics.request_latency.labels(method, route, str(status)).observe(elapsed)
            if route not in ("/healthz", "/readyz", "/metrics"):
                logger.info(
                    "request",
                    extra={
                        "fields": {
                            "method": method,
                            "route": route,
                            "status": status,
                            "duration_ms": round(elapsed * 1000, 2),
                            **context,
                        }
                    },
                )
