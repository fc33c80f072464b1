"""Turning tracing on, once, at a process's start: only the standard OTEL_* variables decide.

    OTEL_SDK_DISABLED=true                  off, whatever else is set
    OTEL_TRACES_EXPORTER                    otlp (OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT
                                            or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), console,
                                            none; comma-separated for several
    PAYMENTS_TRACE_FILE                     spans also as JSON lines to this file
                                            (`exporter.py`; `payments dev --tracing`)
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS   psycopg, httpx (comma-separated): not instrumented
                                            (psycopg: no span per statement)
    OTEL_TRACES_SAMPLER(_ARG), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*,
    OTEL_EXPORTER_OTLP_*                    read by the SDK itself

Tracing is on when it is not disabled and somewhere to send spans is configured: an exporter
other than `none`, an OTLP endpoint, or a trace file. With nothing configured it stays off:
a process with nowhere to send its spans would pay for them for nothing. When off, nothing
is installed: no tracer provider, no instrumentation, no middleware (`server.py`), no traced
cursor (`statements.py`); the hand-made spans of `spans.py` read one flag and return.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from app.tracing.state import STATE

if TYPE_CHECKING:
    # The SDK only once tracing is on: importing it costs every process ~16 ms at start.
    from opentelemetry.sdk.trace.export import SpanExporter

# An ASGI app, as the caller's framework types it (this layer knows no framework).
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

TRACE_FILE_VARIABLE = "PAYMENTS_TRACE_FILE"
DISABLED_VARIABLE = "OTEL_SDK_DISABLED"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HTTP"})

logger = logging.getLogger("payments.tracing")


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    raw = environ.get("OTEL_TRACES_EXPORTER", "")
    return [name.strip().lower() for name in raw.split(",") if name.strip()]


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether `environ` turns tracing on (see the module's table)."""
    if environ.get(DISABLED_VARIABLE, "").strip().lower() == "true":
        return False
    if environ.get(TRACE_FILE_VARIABLE, "").strip():
        return True
    names = _exporter_names(environ)
    if names:
        return names != ["none"]
    return any(environ.get(name, "").strip() for name in _ENDPOINTS)


def configure(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the SDK, its exporters and the instrumentation if `environ` (the process's
    environment by default) turns tracing on; whether it is on. Once per process."""
    if STATE.enabled:
        return True
    environ = os.environ if environ is None else environ
    if not wanted(environ):
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attributes))  # OTEL_TRACES_SAMPLER's
    for exporter in _exporters(environ):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _instrument(environ)
    STATE.enabled = True
    logger.info("tracing on", extra={"fields": {"service": service_name}})
    return True


def _exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from app.tracing.exporter import JsonLinesExporter

    found: list[SpanExporter] = []
    trace_file = environ.get(TRACE_FILE_VARIABLE, "").strip()
    names = _exporter_names(environ) or ([] if trace_file else ["otlp"])
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            found.append(OTLPSpanExporter())
        elif name == "console":
            found.append(ConsoleSpanExporter())
        elif name != "none":
            raise SystemExit(f"payments: OTEL_TRACES_EXPORTER={name!r} is not supported")
    if trace_file:
        found.append(JsonLinesExporter(trace_file))
    return found


def _instrument(environ: Mapping[str, str]) -> None:
    """httpx (the webhook sender) and the statements (the pool's
    cursors, `statements.py`), unless OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names them."""
    raw = environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    disabled = {name.strip().lower() for name in raw.split(",")}
    if "httpx" not in disabled:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor().instrument()
    STATE.statements = "psycopg" not in disabled


def traced_asgi(app: ASGIApp, *, trusted_ports: Collection[int] | None = None) -> ASGIApp:
    """`app` under a server span per request (`server.ServerSpans`: the W3C context of each
    request continued, or with `trusted_ports` only of those arriving on one of them);
    `app` itself when tracing is off."""
    if not STATE.enabled:
        return app
    from app.tracing.server import ServerSpans

    return ServerSpans(app, trusted_ports=trusted_ports)
