"""Per-request observation: the request id, latency by route and status, one JSON log line."""

from __future__ import annotations

import logging
import time

from starlette.datastructures import MutableHeaders
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PROBLEM_JSON, internal_error_body
from app.http.request_id import HEADER, request_id
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
    """ASGI middleware: names each request, records its latency and logs it.

    The request id (`X-Request-Id`) is bound to the log context before anything else runs,
    so every log line and problem body of the request carries it, and it is added to every
    response. An exception nothing else handled is answered here, as a 500 problem with the
    id: the framework's last-resort handler runs outside this middleware and would lose it.

    `route` labels the requests when the caller knows the route before serving them (a fast
    route, `app/http/fast_path.py`); without it the label is read from the scope afterwards.
    """

    def __init__(self, app: ASGIApp, *, metrics: Metrics, route: str | None = None):
        self.app = app
        self.metrics = metrics
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        rid = request_id(scope["headers"])
        context = new_context(request_id=rid)
        response_started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            if response_started:
                raise
            logger.exception("unhandled error on %s %s", scope["method"], scope["path"])
            keyed = any(name == b"idempotency-key" for name, _ in scope["headers"])
            body = internal_error_body(keyed=keyed)
            await send_wrapper(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", PROBLEM_JSON.encode()),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_wrapper({"type": "http.response.body", "body": body})
        finally:
            elapsed = time.perf_counter() - started
            route = self.route or _route_template(scope)
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
