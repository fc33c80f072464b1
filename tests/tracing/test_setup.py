"""What turns tracing on, and that off installs nothing (in this process: it never traces)."""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
import pytest
from opentelemetry import trace

from app.tracing import spans
from app.tracing.setup import configure, wanted
from app.tracing.state import STATE


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
    # The hand-made spans do nothing.
    assert spans.traceparent() is None
    assert spans.ids() is None
    with spans.span("anything") as current:
        assert current is None
    assert not (tmp_path / "t.jsonl").exists()
