"""`ServerSpans`: a server span per HTTP request, continuing a trusted caller's W3C trace context.

This is the one place a request's span is made, for every app that traces itself (the API's
two listeners, the fake provider), so the fast `POST /payments` is traced exactly as a routed
request. It is ours rather than `opentelemetry-instrumentation-asgi`'s middleware: measured
(docs/tracing.md), that middleware cost more per request than the whole rest of a traced
payment, decoding every header into attributes and wrapping every message, where a span needs
the method, the path, the route and the status. The span is named `METHOD` when it starts and
`METHOD /route/{template}` when the response starts, if a route took the request (FastAPI's
router and our fast routes both leave it in the scope); the attributes follow OpenTelemetry's
stable HTTP conventions, and a 5xx answer marks the span an error.

Whose trace context is believed: with `trusted_ports` None (the fake provider, which only
our processes call), every caller's; otherwise only that of connections arriving on those
ports (the API's operators' listener). Any other request (the API's public listener) starts
a new trace, linked to the caller's span if its `traceparent` parses (its `tracestate` is
not read at all): a client does not decide whether its request is sampled, nor which trace
id the operation's row stores, nor what the SDK logs. A request refused before anyone was
authenticated (`spans.refused_unauthenticated`, and any `401`) is not traced: its span is
never ended, so never exported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, use_span

from app.tracing.spans import REFUSED_UNAUTHENTICATED, extract, links_to

# An ASGI app, as the caller's framework types it (this layer knows no framework).
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

# Requests that would only fill traces: probes and scrapes.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_CONTEXT_HEADERS = (b"traceparent", b"tracestate")
_UNAUTHENTICATED = 401


def _traceparent(headers: list[tuple[bytes, bytes]]) -> str | None:
    """A request's `traceparent` header, if it carries one."""
    for name, value in headers:
        if name == b"traceparent":
            return value.decode("latin-1")
    return None


def _incoming_context(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The W3C trace-context headers of a request, if it carries any."""
    found: dict[str, str] = {}
    for name, value in headers:
        if name in _CONTEXT_HEADERS:
            found[name.decode("latin-1")] = value.decode("latin-1")
    return found


class ServerSpans:
    """ASGI middleware: each HTTP request (but probes and scrapes) under a server span, the
    span current while the request is served; an exception that escapes marks it an error.
    The caller's trace is continued on `trusted_ports` (every port when None) only."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tracer: trace.Tracer | None = None,
        trusted_ports: Collection[int] | None = None,
    ):
        self.app = app
        self._tracer = tracer if tracer is not None else trace.get_tracer("payments.http")
        self._trusted_ports = None if trusted_ports is None else frozenset(trusted_ports)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        attributes = {
            "http.request.method": method,
            "url.scheme": scope.get("scheme", "http"),
            "url.path": scope["path"],
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        server = scope.get("server")
        port = server[1] if server else None
        if port is not None:
            attributes["server.port"] = port
        links: Sequence[Link] = ()
        if self._trusted_ports is None or port in self._trusted_ports:
            carrier = _incoming_context(scope["headers"])
            parent = extract(carrier) if carrier else None
        else:
            # A new trace, whatever the caller sent: at most a link to its span.
            parent = None
            links = links_to(_traceparent(scope["headers"]))
        span = self._tracer.start_span(
            method, context=parent, kind=SpanKind.SERVER, attributes=attributes, links=links
        )
        answered = 0

        async def send_answered(message: Any) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = status = message["status"]
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
            await send(message)

        try:
            with use_span(span, record_exception=True, set_status_on_exception=True):
                await self.app(scope, receive, send_answered)
        finally:
            if answered != _UNAUTHENTICATED and not scope.get(REFUSED_UNAUTHENTICATED):
                span.end()
