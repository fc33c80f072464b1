"""What a tenant's client can no longer do to the API's traces, against real API processes.

On the public listener a request's trace is the API's own: a caller's `traceparent` neither
decides sampling nor names the trace (the operation row's stored context included), only
a link leads to it; its `tracestate` is not read, so never logged. A request refused before
anyone was authenticated (`401`, or `429` for too many of those) leaves no span at all. The
operators' listener still continues its callers' traces: it serves as each test's control
that spans are being written.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from app.tenants.keys import generate_api_key
from app.tracing.exporter import read_spans
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client

Span = dict[str, Any]

# Spans leave each process a tenth of a second after they end.
TRACED = {"OTEL_BSP_SCHEDULE_DELAY": "100"}
NOTHING_SAMPLED = {
    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
    "OTEL_TRACES_SAMPLER_ARG": "0",
}


def _callers_context() -> tuple[str, str, str]:
    """A caller's trace id, span id, and its `traceparent` flagged sampled."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _control(api: Process, trace_file: Path) -> Span:
    """A request on the operators' listener, sampled by its caller's flag there, and its
    span once exported: every span the API ended before it is in the file by then (a
    process exports its spans in the order they end)."""
    assert api.admin_url is not None
    trace_id, _, traceparent = _callers_context()
    answer = httpx.get(f"{api.admin_url}/no-such-page", headers={"traceparent": traceparent})
    assert answer.status_code == 404, answer.text

    def exported() -> list[Span]:
        return [s for s in read_spans(trace_file) if s["trace_id"] == trace_id]

    wait_until(lambda: bool(exported()), timeout=10, message="the control request's span")
    (span,) = exported()
    return span


def _stored_traceparent(db: psycopg.Connection[DictRow], operation_id: str) -> str:
    row = db.execute("SELECT traceparent FROM operations WHERE id = %s", (operation_id,)).fetchone()
    assert row is not None
    assert row["traceparent"] is not None
    return str(row["traceparent"])


def test_a_callers_sampled_flag_does_not_sample_a_request_at_0_percent(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    api = spawn.api(**TRACED, **NOTHING_SAMPLED, PAYMENTS_TRACE_FILE=str(trace_file))
    trace_id, _, traceparent = _callers_context()
    with api_client(api, tenant) as client:
        paid = post_payment(
            client, payment_body(), key=new_key(), headers={"traceparent": traceparent}
        )
        assert paid.status_code == 201, paid.text
        listed = client.get("/events", headers={"traceparent": traceparent})
        assert listed.status_code == 200, listed.text
    control = _control(api, trace_file)

    assert [s["trace_id"] for s in read_spans(trace_file)] == [control["trace_id"]]
    # The stored context is the API's own trace, not sampled.
    stored = _stored_traceparent(db, paid.json()["operation_id"])
    assert trace_id not in stored
    assert int(stored.rsplit("-", 1)[1], 16) & 1 == 0, f"flagged sampled: {stored}"


def test_at_100_percent_the_request_is_a_trace_of_its_own_linked_to_the_callers(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    api = spawn.api(**TRACED, OTEL_TRACES_SAMPLER="always_on", PAYMENTS_TRACE_FILE=str(trace_file))
    trace_id, span_id, traceparent = _callers_context()
    with api_client(api, tenant) as client:
        paid = post_payment(
            client, payment_body(), key=new_key(), headers={"traceparent": traceparent}
        )
        assert paid.status_code == 201, paid.text
    operation_id = paid.json()["operation_id"]
    _control(api, trace_file)

    (request,) = [
        s
        for s in read_spans(trace_file)
        if s["kind"] == "server" and s["attributes"].get("payments.operation_id") == operation_id
    ]
    assert request["trace_id"] != trace_id
    assert request["parent_id"] is None
    assert request["links"] == [{"trace_id": trace_id, "span_id": span_id}]
    stored = _stored_traceparent(db, operation_id)
    assert stored.startswith(f"00-{request['trace_id']}-{request['span_id']}-")
    assert not any(s["trace_id"] == trace_id for s in read_spans(trace_file))


def test_a_request_refused_before_authentication_leaves_no_span(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    api = spawn.api(
        **TRACED,
        OTEL_TRACES_SAMPLER="always_on",
        PAYMENTS_TRACE_FILE=str(trace_file),
        PAYMENTS_UNAUTHENTICATED_RATE_LIMIT_PER_S="0.1",
        PAYMENTS_UNAUTHENTICATED_RATE_LIMIT_BURST="3",
    )
    assert api.url is not None
    _, _, traceparent = _callers_context()
    with api_client(api, tenant) as client:
        # The tenant's key first: remembered, so the address's limit does not refuse it.
        assert client.get("/events").status_code == 200
        with httpx.Client(base_url=api.url, headers={"traceparent": traceparent}) as stranger:
            refused = [
                stranger.get("/events").status_code,
                stranger.get("/events", headers={"authorization": "Bearer sk_nope"}).status_code,
                # Of a key's shape: looked up (outside any trace).
                stranger.post(
                    "/payments",
                    json=payment_body(),
                    headers={"authorization": f"Bearer {generate_api_key()}"},
                ).status_code,
                stranger.get("/events").status_code,
            ]
        assert refused == [401, 401, 401, 429]
        assert client.get("/events").status_code == 200
    control = _control(api, trace_file)

    spans = read_spans(trace_file)
    served = [
        (s["name"], s["attributes"]["http.response.status_code"])
        for s in spans
        if s["kind"] == "server"
    ]
    assert served == [("GET /events", 200), ("GET /events", 200), ("GET", 404)]
    requests = {s["trace_id"] for s in spans if s["kind"] == "server"}
    assert {s["trace_id"] for s in spans} == requests, "a span of no exported request"
    assert control["trace_id"] in requests


def test_a_callers_tracestate_is_not_logged(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle
) -> None:
    marker = f"injected{secrets.token_hex(4)}"
    api = spawn.api(**TRACED, PAYMENTS_TRACE_FILE=str(tmp_path / "spans.jsonl"))
    _, _, traceparent = _callers_context()
    headers = {"traceparent": traceparent, "tracestate": f"Bad Key={marker},{marker}=="}
    with api_client(api, tenant) as client:
        assert client.get("/events", headers=headers).status_code == 200
        assert (
            post_payment(client, payment_body(), key=new_key(), headers=headers).status_code == 201
        )
    # Logged (if at all) while the request was served, before its answer.
    assert marker not in api.log()
