"""Turning tracing on, once, at a process's start: only the standard OTEL_* variables decide.

    OTEL_SDK_DISABLED=true                  off, whatever else is set
    OTEL_TRACES_EXPORTER                    otlp (OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT
                                            or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), console,
                                            none; comma-separated for several
    PAYMENTS_TRACE_FILE                     spans also as JSON lines to this file
                                            (`exporter.py`; `payments dev --tracing`)
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS   psycopg, httpx (comma-separated): not instrumented
                                            (a statement's span costs as much as the request's)
    OTEL_TRACES_SAMPLER(_ARG), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*,
    OTEL_EXPORTER_OTLP_*                    read by the SDK itself

Tracing is on when it is not disabled and somewhere to send spans is configured: an exporter
other than `none`, an OTLP endpoint, or a trace file. With nothing configured it stays off:
a process with nowhere to send its spans would pay for them for nothing. When off, nothing
is installed: no tracer provider, no instrumentation, no middleware; the hand-made spans of
`spans.py` read one flag and return.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from opentelemetry.context import Context
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState, get_current_span
from opentelemetry.util.types import Attributes

from app.tracing.state import STATE

# An ASGI app, as the caller's framework types it (this layer knows no framework).
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

TRACE_FILE_VARIABLE = "PAYMENTS_TRACE_FILE"
DISABLED_VARIABLE = "OTEL_SDK_DISABLED"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# Requests that would only fill traces: probes and scrapes.
_UNTRACED_PATHS = ("/healthz$", "/readyz$", "/metrics$")
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


class NoBareStatements(Sampler):
    """The configured sampler, except that a database statement outside any span is not
    traced: the worker's polls (what is due, every fraction of a second) would otherwise be
    a trace each, burying the payments' traces."""

    def __init__(self, inner: Sampler):
        self._inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = get_current_span(parent_context).get_span_context()
        if not parent.is_valid and kind is SpanKind.CLIENT and name not in _HTTP_METHODS:
            # A client span outside any span and not httpx's: a statement (psycopg's spans
            # are named by the statement's first word; their attributes come later).
            return SamplingResult(Decision.DROP)
        return self._inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"NoBareStatements{{{self._inner.get_description()}}}"


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
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.sampler = NoBareStatements(provider.sampler)  # OTEL_TRACES_SAMPLER's, wrapped
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
    """httpx (the webhook sender, the settlement books) and psycopg (every statement), unless
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names them."""
    raw = environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    disabled = {name.strip().lower() for name in raw.split(",")}
    if "httpx" not in disabled:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor().instrument()
    if "psycopg" not in disabled:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        PsycopgInstrumentor().instrument(enable_commenter=False, skip_dep_check=True)


def traced_asgi(app: ASGIApp) -> ASGIApp:
    """`app` under the ASGI middleware's server spans (the W3C context of each request
    continued); `app` itself when tracing is off."""
    if not STATE.enabled:
        return app
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.util.http import ExcludeList

    traced = OpenTelemetryMiddleware(
        app,
        excluded_urls=ExcludeList(list(_UNTRACED_PATHS)),
        exclude_spans=["receive", "send"],
    )
    return cast(ASGIApp, traced)
