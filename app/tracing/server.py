"""`ServerSpans`: a server span per HTTP request, continuing the caller's W3C trace context.

This is the one place a request's span is made, for every app that traces itself (the API's
two listeners, the fake provider), so the fast `POST /payments` is traced exactly as a routed
request. It is ours rather than `opentelemetry-instrumentation-asgi`'s middleware: measured
(docs/tracing.md), that middleware cost more per request than the whole rest of a traced
payment, decoding every header into attributes and wrapping every message, where a span needs
the method, the path, the route and the status. The span is named `METHOD` when it starts and
`METHOD /route/{template}` when the response starts, if a route took the request (FastAPI's
router and our fast routes both leave it in the scope); the attributes follow OpenTelemetry's
stable HTTP conventions, and a 5xx answer marks the span an error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, use_span

from app.tracing.spans import extract

# An ASGI app, as the caller's framework types it (this layer knows no framework).
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

# Requests that would only fill traces: probes and scrapes.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_CONTEXT_HEADERS = (b"traceparent", b"tracestate")


def _incoming_context(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The W3C trace-context headers of a request, if it carries any."""
    found: dict[str, str] = {}
    for name, value in headers:
        if name in _CONTEXT_HEADERS:
            found[name.decode("latin-1")] = value.decode("latin-1")
    return found


class ServerSpans:
    """ASGI middleware: each HTTP request (but probes and scrapes) under a server span, the
    span current while the request is served; an exception that escapes marks it an error."""

    def __init__(self, app: ASGIApp, *, tracer: trace.Tracer | None = None):
        self.app = app
        self._tracer = tracer if tracer is not None else trace.get_tracer("payments.http")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        carrier = _incoming_context(scope["headers"])
        method = scope["method"]
        attributes = {
            "http.request.method": method,
            "url.scheme": scope.get("scheme", "http"),
            "url.path": scope["path"],
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        server = scope.get("server")
        if server and server[1] is not None:
            attributes["server.port"] = server[1]
        span = self._tracer.start_span(
            method,
            context=extract(carrier) if carrier else None,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )

        async def send_answered(message: Any) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
            await send(message)

        with use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            await self.app(scope, receive, send_answered)
