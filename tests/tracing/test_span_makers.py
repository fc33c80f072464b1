"""The server span of each request and the span of each statement, in this process.

Each test records into a tracer provider of its own (an in-memory exporter), never the
process's global one: this process does not trace (`test_setup.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer, use_span

from app.tracing.server import ServerSpans
from app.tracing.statements import TracedCursor

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


Get = Callable[..., httpx.Response]


@pytest.fixture
def served(tracer: Tracer) -> Get:
    """GET on a small app under `ServerSpans`, in this process."""
    app = FastAPI()

    @app.get("/things/{thing_id}")
    def thing(thing_id: str) -> dict[str, str]:
        return {"id": thing_id}

    @app.get("/broken")
    def broken() -> None:
        raise RuntimeError("boom")

    @app.get("/healthz")
    def healthz() -> str:
        return "ok"

    transport = httpx.ASGITransport(app=ServerSpans(app, tracer=tracer), raise_app_exceptions=False)

    def get(path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.get(path, **kwargs)

        return asyncio.run(go())

    return get


def test_a_request_is_a_server_span_named_by_its_route(
    served: Get, exporter: InMemorySpanExporter
) -> None:
    assert served("/things/th_123").status_code == 200

    (span,) = exporter.get_finished_spans()
    assert span.name == "GET /things/{thing_id}"  # the template: ids would explode the names
    assert span.kind is SpanKind.SERVER
    assert span.parent is None
    assert attributes(span) == {
        "http.request.method": "GET",
        "url.scheme": "http",
        "url.path": "/things/th_123",
        # no `server.port`: this in-process transport serves on none
        "network.protocol.version": "1.1",
        "http.route": "/things/{thing_id}",
        "http.response.status_code": 200,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_request_continues_its_callers_trace(served: Get, exporter: InMemorySpanExporter) -> None:
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"

    served("/things/th_1", headers={"traceparent": traceparent})

    (span,) = exporter.get_finished_spans()
    assert format(span.context.trace_id, "032x") == CALLER_TRACE
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == CALLER_SPAN
    assert span.parent.is_remote


def test_a_malformed_traceparent_starts_a_trace_of_its_own(
    served: Get, exporter: InMemorySpanExporter
) -> None:
    served("/things/th_1", headers={"traceparent": "00-not-a-trace-01"})

    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert format(span.context.trace_id, "032x") != CALLER_TRACE


def test_an_unmatched_request_is_named_by_its_method_and_a_failed_one_is_an_error(
    served: Get, exporter: InMemorySpanExporter
) -> None:
    assert served("/nowhere").status_code == 404
    assert served("/broken").status_code == 500

    missing, broken = exporter.get_finished_spans()
    assert missing.name == "GET"
    assert missing.status.status_code is StatusCode.UNSET  # a 4xx is the client's
    assert broken.name == "GET /broken"
    assert broken.status.status_code is StatusCode.ERROR
    assert [event.name for event in broken.events] == ["exception"]


def test_probes_are_not_traced(served: Get, exporter: InMemorySpanExporter) -> None:
    assert served("/healthz").status_code == 200

    assert exporter.get_finished_spans() == ()


def cursor_of(tracer: Tracer) -> type[TracedCursor]:
    return type("TestCursor", (TracedCursor,), {"tracer": tracer})


def test_a_statement_is_a_client_span_under_the_span_that_sent_it(
    database_url: str, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    async def go() -> None:
        connection = await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, cursor_factory=cursor_of(tracer)
        )
        async with connection:
            await connection.execute("SELECT 1")  # outside any span: no span
            with tracer.start_as_current_span("request") as request:
                await connection.execute("  select %s::text AS secret", ("sk_live_1",))
                with pytest.raises(psycopg.errors.DivisionByZero):
                    await connection.execute("SELECT 1 / %s", (0,))
            with use_span(request):  # ended: no longer recording, so no span
                await connection.execute("SELECT 2")

    asyncio.run(go())

    statement, failed, parent = exporter.get_finished_spans()
    assert parent.name == "request"
    assert statement.name == "SELECT"
    assert statement.kind is SpanKind.CLIENT
    assert statement.parent is not None
    assert statement.parent.span_id == parent.context.span_id
    assert attributes(statement) == {
        "db.system.name": "postgresql",
        "db.operation.name": "SELECT",
        "db.query.text": "  select %s::text AS secret",  # placeholders, never the values
    }
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "DivisionByZero"
    assert [event.name for event in failed.events] == ["exception"]
