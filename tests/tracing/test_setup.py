"""What turns tracing on, and that off installs nothing (in this process: it never traces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry import trace

from app.devserver import tracing_env
from app.tracing import spans
from app.tracing.setup import configure, traced_asgi, wanted
from app.tracing.state import STATE, statements
from app.tracing.view import operation_traces


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"PAYMENTS_TRACE_FILE": "/tmp/spans.jsonl"}, True),
        ({"PAYMENTS_TRACE_FILE": "/tmp/spans.jsonl", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_what_turns_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert wanted(environ) is on


async def app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never served")


def test_disabled_installs_nothing(tmp_path: Path) -> None:
    environ = {"OTEL_SDK_DISABLED": "true", "PAYMENTS_TRACE_FILE": str(tmp_path / "t.jsonl")}
    connect = psycopg.AsyncConnection.connect
    send = httpx.AsyncClient.send

    assert configure("payments-test", environ) is False

    assert STATE.enabled is False
    # No tracer provider of the SDK, no wrapped psycopg or httpx.
    assert type(trace.get_tracer_provider()).__module__.startswith("opentelemetry.trace")
    assert psycopg.AsyncConnection.connect == connect
    assert httpx.AsyncClient.send is send
    assert not hasattr(psycopg.AsyncConnection.connect, "__wrapped__")
    assert not hasattr(httpx.AsyncClient.send, "__wrapped__")
    # No server-span middleware, no traced cursor for the pool's connections.
    assert traced_asgi(app) is app
    assert statements() is False
    # The hand-made spans do nothing.
    assert spans.traceparent() is None
    assert spans.ids() is None
    with spans.span("anything") as current:
        assert current is None
    assert not (tmp_path / "t.jsonl").exists()


def test_payments_dev_traces_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_BSP_SCHEDULE_DELAY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)

    off = tracing_env(tmp_path, tracing=False)
    on = tracing_env(tmp_path, tracing=True)

    assert off == {"OTEL_SDK_DISABLED": "true"}
    assert not wanted(off)
    assert on["PAYMENTS_TRACE_FILE"] == str((tmp_path / "traces.jsonl").resolve())
    assert on["OTEL_TRACES_EXPORTER"] == "none"  # the file only: no collector to send to
    assert wanted(on)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing_env(tmp_path, tracing=True)["OTEL_TRACES_EXPORTER"] == "otlp"


def test_an_operations_traces_print_as_trees() -> None:
    def span(name: str, trace: str, span_id: str, parent: str | None, **extra: object) -> Any:
        return {
            "name": name,
            "service": "svc",
            "trace_id": trace,
            "span_id": span_id,
            "parent_id": parent,
            "start": 1.0,
            "end": 1.5,
            "status": "unset",
            "attributes": {},
            "links": [],
            **extra,
        }

    request = span("POST /payments", "t1", "a", None, attributes={"payments.operation_id": "op"})
    spans = [
        request,
        span("provider charge", "t1", "b", "a", status="error"),
        span(
            "reconcile",
            "t2",
            "c",
            None,
            attributes={"payments.operation_id": "op"},
            links=[{"trace_id": "t1", "span_id": "a"}],
            start=2.0,
            end=2.5,
        ),
        span("other", "t3", "d", None, attributes={"payments.operation_id": "another"}),
    ]

    assert operation_traces(spans, "op").splitlines() == [
        "trace t1",
        "  - svc: POST /payments  500.0 ms",
        "    - svc: provider charge  500.0 ms  ERROR",
        "trace t2",
        "  - svc: reconcile  500.0 ms  (linked to svc POST /payments of trace t1)",
    ]
    assert operation_traces(spans, "none") == ""
