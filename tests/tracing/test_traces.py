"""One trace per payment, across real processes: the API, the provider, the worker, webhooks.

Every process writes its spans as JSON lines to one file (`PAYMENTS_TRACE_FILE`), read here.
A payment whose answer is lost (`drop_after_commit`) is one trace for the request (the API's
server span, the provider call under it, the provider's own spans); the worker's reconcile
is a trace of its own linked to the request, and so is the webhook delivery it leads to.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.tracing.exporter import read_spans
from app.tracing.view import operation_traces
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import free_port
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS, FAST_WORKER, PROVIDER_AUTH
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.factories.webhooks import create_endpoint

Span = dict[str, Any]

# Spans leave each process a tenth of a second after they end.
TRACED = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


def one(spans: list[Span], **match: Any) -> Span:
    found = [s for s in spans if all(s.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s["service"], s["name"]) for s in spans])
    return found[0]


def links_to(span: Span, target: Span) -> bool:
    return {"trace_id": target["trace_id"], "span_id": target["span_id"]} in span["links"]


def test_a_lost_answer_is_one_trace_and_its_recovery_and_webhook_link_to_it(
    spawn: Spawner,
    tmp_path: Path,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    env = {**TRACED, "PAYMENTS_TRACE_FILE": str(trace_file)}
    port = free_port()
    provider_url = f"http://127.0.0.1:{port}"
    # Side by side: starting the processes is most of the test. The worker (not waited for)
    # once the API answers, so that four processes do not start at once on two cores.
    with ThreadPoolExecutor(max_workers=3) as starting:
        provider = starting.submit(spawn.provider, tmp_path / "ledger.db", port=port, env=env)
        receiver_started = starting.submit(spawn.receiver, tmp_path / "received.jsonl")
        api = spawn.api(PAYMENTS_PROVIDER_URL=provider_url, **FAST_WORKER, **env)
        spawn.worker(
            once=False,
            PAYMENTS_PROVIDER_URL=provider_url,
            **{**FAST_WEBHOOKS, **FAST_WORKER},
            **env,
        )
        provider.result()
        receiver = receiver_started.result()
    faults = FaultInjector(provider_url)
    with api_client(api, tenant) as client:
        create_endpoint(client, receiver.url)
        key, body = new_key(), payment_body()
        faults.add("drop_after_commit", account_id=body["account_id"])
        accepted = post_payment(client, body, key=key)
        assert accepted.status_code == 202, accepted.text
        operation_id = accepted.json()["operation_id"]
        wait_until(lambda: len(receiver.answered()) == 1, message="the webhook")
        # A routed request, beside the fast route's POST: named by its route's template.
        read = client.get(f"/operations/{operation_id}")
        assert read.status_code == 200, read.text

    # The worker delivers (and reconciles) whatever is due, other tests' work too: ours are
    # the spans naming our operation.
    def ours() -> list[Span]:
        found = read_spans(trace_file)
        return [s for s in found if s["attributes"].get("payments.operation_id") == operation_id]

    def complete() -> bool:
        names = {(s["service"], s["name"]) for s in ours()}
        served = {(s["service"], s["name"]) for s in read_spans(trace_file)}
        expected = {("payments-worker", "reconcile"), ("payments-worker", "webhook deliver")}
        return expected <= names and ("payments-api", "GET /operations/{operation_id}") in served

    wait_until(complete, timeout=10, message="the worker's spans")
    spans, mine = read_spans(trace_file), ours()

    request = one(mine, service="payments-api", name="POST /payments", kind="server")
    assert request["attributes"]["payments.operation_id"] == operation_id
    assert request["attributes"]["payments.provider"] == "primary"
    assert request["attributes"]["payments.provider_attempt"] == 0
    trace = [s for s in spans if s["trace_id"] == request["trace_id"]]
    call = one(trace, service="payments-api", name="provider charge", kind="client")
    assert call["parent_id"] == request["span_id"]
    assert call["attributes"]["payments.provider_outcome"] == "unknown"
    provider_request = one(trace, service="fake-provider", kind="server")
    assert provider_request["parent_id"] == call["span_id"]
    ledger = one(trace, service="fake-provider", name="ledger charge")
    assert ledger["parent_id"] == provider_request["span_id"]
    assert (
        call["attributes"]["payments.provider_key"] == ledger["attributes"]["payments.provider_key"]
    )
    stored = db.execute(
        "SELECT traceparent FROM operations WHERE id = %s", (operation_id,)
    ).fetchone()
    assert stored is not None
    # The request's own context (its flags: sampled, and perhaps random).
    assert stored["traceparent"].startswith(f"00-{request['trace_id']}-{request['span_id']}-")

    reconcile = one(mine, service="payments-worker", name="reconcile")
    assert reconcile["trace_id"] != request["trace_id"]
    assert reconcile["parent_id"] is None
    assert links_to(reconcile, request)
    assert reconcile["attributes"]["payments.operation_id"] == operation_id
    assert reconcile["attributes"]["payments.transition"].endswith("->COMPLETED")
    lookup = one(
        [s for s in spans if s["trace_id"] == reconcile["trace_id"]], name="provider lookup"
    )
    assert lookup["trace_id"] == reconcile["trace_id"]

    delivery = one(mine, service="payments-worker", name="webhook deliver")
    assert delivery["trace_id"] not in (request["trace_id"], reconcile["trace_id"])
    assert links_to(delivery, request)
    assert delivery["attributes"]["payments.operation_id"] == operation_id
    posts = [s for s in spans if s["trace_id"] == delivery["trace_id"] and s["kind"] == "client"]
    assert posts, "httpx's span of the webhook's POST"

    # `payments ops show` prints the three traces, the worker's linked to the request's.
    shown = operation_traces(spans, operation_id)
    assert sum(line.startswith("trace ") for line in shown.splitlines()) == 3, shown
    assert shown.count("(linked to payments-api POST /payments") == 2, shown
    assert "  - payments-api: POST /payments" in shown
    assert "      - fake-provider: ledger charge" in shown

    # Nothing raw: no idempotency key, no request body, no secret.
    text = trace_file.read_text()
    assert key not in text
    assert body["account_id"] not in text
    assert tenant.api_key not in text
    # The request's log line carries its trace.
    request_lines = [line for line in api.log().splitlines() if '"msg": "request"' in line]
    assert any(request["trace_id"] in line for line in request_lines)


def test_with_the_sdk_disabled_nothing_is_traced(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    env = {**TRACED, "PAYMENTS_TRACE_FILE": str(trace_file), "OTEL_SDK_DISABLED": "true"}
    api = spawn.api(**env)
    with api_client(api, tenant) as client:
        paid = post_payment(client, payment_body(), key=new_key())
        assert paid.status_code == 201, paid.text
        assert client.get("/payments/" + paid.json()["payment_id"]).status_code == 200
    stored = db.execute(
        "SELECT traceparent FROM operations WHERE id = %s", (paid.json()["operation_id"],)
    ).fetchone()
    assert stored is not None
    assert stored["traceparent"] is None
    assert not trace_file.exists()
    assert '"trace_id"' not in api.log()
    assert "tracing on" not in api.log()


@pytest.mark.parametrize("disabled", ["", "psycopg"])
def test_each_statement_is_a_span_unless_its_instrumentation_is_disabled(
    disabled: str, spawn: Spawner, tmp_path: Path, tenant: TenantHandle
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    env = {
        **TRACED,
        "PAYMENTS_TRACE_FILE": str(trace_file),
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled,
    }
    api = spawn.api(**env)
    with api_client(api, tenant) as client:
        paid = post_payment(client, payment_body(), key=new_key())
        assert paid.status_code == 201, paid.text
    operation_id = paid.json()["operation_id"]

    def the_request() -> list[Span]:
        return [
            s
            for s in read_spans(trace_file)
            if s["kind"] == "server"
            and s["attributes"].get("payments.operation_id") == operation_id
        ]

    wait_until(lambda: bool(the_request()), timeout=10, message="the request's span")
    (request,) = the_request()
    in_trace = [s for s in read_spans(trace_file) if s["trace_id"] == request["trace_id"]]
    statements = [
        s
        for s in in_trace
        if s["service"] == "payments-api"
        and s["kind"] == "client"
        and s["name"] != "provider charge"
    ]
    one(in_trace, service="payments-api", name="provider charge", kind="client")
    if disabled:
        assert statements == []
    else:
        assert statements, [(s["service"], s["name"], s["kind"]) for s in in_trace]


def test_a_payment_not_sampled_leaves_no_span_anywhere(
    spawn: Spawner, tmp_path: Path, tenant: TenantHandle
) -> None:
    # The API samples nothing; the provider, traced too, samples as its parent says (the
    # SDK's default). Told nothing, it would start a trace of its own for the charge.
    trace_file = tmp_path / "spans.jsonl"
    port = free_port()
    provider_url = f"http://127.0.0.1:{port}"
    spawn.provider(
        tmp_path / "ledger.db", port=port, env={**TRACED, "PAYMENTS_TRACE_FILE": str(trace_file)}
    )
    api = spawn.api(
        PAYMENTS_PROVIDER_URL=provider_url,
        PAYMENTS_TRACE_FILE=str(trace_file),
        OTEL_TRACES_SAMPLER="always_off",
        **TRACED,
    )
    with api_client(api, tenant) as client:
        for _ in range(3):
            paid = post_payment(client, payment_body(), key=new_key())
            assert paid.status_code == 201, paid.text
    # A control: a request to the provider with no trace context is a trace of the
    # provider's own. Its span in the file means the charges' would be there too (a process
    # exports its spans in the order they end).
    control = httpx.get(
        f"{provider_url}/charges", params={"idempotency_key": "control"}, headers=PROVIDER_AUTH
    )
    assert control.status_code == 404, control.text
    wait_until(lambda: bool(read_spans(trace_file)), timeout=10, message="the control's span")

    spans = read_spans(trace_file)
    assert [(s["service"], s["name"]) for s in spans] == [("fake-provider", "GET /charges")]
    assert "tracing on" in api.log()


def test_a_retry_that_reconciles_inline_does_it_under_its_own_request_span(
    spawn: Spawner,
    tmp_path: Path,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    # The first request's answer is lost (UNKNOWN, 202); its retry takes the operation over
    # and reconciles it in the request (app/idempotency/flow.py): that `reconcile` belongs to
    # the retry's trace, a child of its server span, not a trace of its own.
    trace_file = tmp_path / "spans.jsonl"
    api = spawn.api(**TRACED, PAYMENTS_TRACE_FILE=str(trace_file))
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    with api_client(api, tenant) as client:
        lost = post_payment(client, body, key=key)
        assert lost.status_code == 202, lost.text
        # Reconciled in the request (whatever the lookup tells it: the answer is 201 or 202).
        retried = post_payment(client, body, key=key)
        assert retried.status_code in (201, 202), retried.text
    operation_id = lost.json()["operation_id"]
    stored = db.execute("SELECT traceparent FROM operations WHERE id = %s", (operation_id,))
    row = stored.fetchone()
    assert row is not None
    first_trace = row["traceparent"].split("-")[1]

    def reconciles() -> list[Span]:
        return [
            s
            for s in read_spans(trace_file)
            if s["name"] == "reconcile"
            and s["attributes"].get("payments.operation_id") == operation_id
        ]

    wait_until(lambda: bool(reconciles()), timeout=10, message="the inline reconcile's span")
    (reconcile,) = reconciles()
    assert reconcile["service"] == "payments-api"
    assert reconcile["parent_id"] is not None, "the inline reconcile started a trace of its own"

    def parents() -> list[Span]:
        return [s for s in read_spans(trace_file) if s["span_id"] == reconcile["parent_id"]]

    # The retry's span ends (and is exported) after the reconcile's, inside it.
    wait_until(lambda: bool(parents()), timeout=10, message="the reconcile's parent span")
    (retry,) = parents()
    assert retry["kind"] == "server"
    assert retry["name"] == "POST /payments"
    assert retry["trace_id"] == reconcile["trace_id"]
    # The retry's, not the first request's (which had answered its 202 before, and claimed).
    first = one(read_spans(trace_file), kind="server", name="POST /payments", trace_id=first_trace)
    assert first["attributes"]["payments.operation_id"] == operation_id
    assert retry["trace_id"] != first_trace
