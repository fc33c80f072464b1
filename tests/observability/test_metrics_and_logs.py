"""Metrics move as things happen; logs are JSON with context and no raw keys."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
from psycopg.rows import DictRow

from app.observability.logging import key_hash
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process, free_port
from tests.support.control.system import start_worker
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in the exposition text (0 if absent)."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:]+)(?:\{(.*)\})? (.+)", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return 0.0


def _scrape(url: str) -> str:
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def test_replays_conflicts_and_expired_keys_are_counted(
    api: Process, client: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    assert api.admin_url is not None
    before = _scrape(api.admin_url)
    key, body = new_key(), payment_body()
    created = post_payment(client, body, key=key)
    post_payment(client, body, key=key)
    post_payment(client, body, key=key)
    post_payment(client, {**body, "amount": "1.00"}, key=key)
    db.execute(
        "UPDATE operations SET completed_at = now() - interval '2 days' WHERE id = %s",
        (created.json()["operation_id"],),
    )
    assert post_payment(client, body, key=key).status_code == 422
    after = _scrape(api.admin_url)

    def delta(name: str, **labels: str) -> float:
        return _metric(after, name, **labels) - _metric(before, name, **labels)

    assert delta("payments_idempotent_replays_total") == 2
    assert delta("payments_idempotency_conflicts_total", reason="different_request") == 1
    assert delta("payments_expired_key_retries_total") == 1
    assert delta("payments_provider_calls_total", operation="charge", outcome="succeeded") == 1
    assert delta("payments_provider_call_duration_seconds_count", operation="charge") == 1
    assert (
        delta(
            "payments_http_request_duration_seconds_count",
            method="POST",
            route="/payments",
            status="201",
        )
        == 3
    )


def test_in_progress_conflicts_and_backlog_gauges(
    api: Process, client: httpx.Client, tenant: TenantHandle, faults: FaultInjector
) -> None:
    assert api.admin_url is not None
    before = _scrape(api.admin_url)

    # A request held at the provider (latency below the provider timeout) while the same
    # request arrives again: the second is a 409 in progress, and counted as one.
    slow, key = payment_body(), new_key()
    faults.add("latency", account_id=slow["account_id"], delay_s=1.5)
    with api_client(api, tenant) as other, ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(post_payment, other, slow, key=key)
        wait_until(
            lambda: client.get("/operations", params={"idempotency_key": key}).status_code == 200,
            message="the first request's claim",
        )
        duplicate = post_payment(client, slow, key=key)
        assert duplicate.status_code == 409, duplicate.text
        assert first.result(timeout=30).status_code == 201

    # An unknown outcome, then a retry whose inline lookup the provider cannot answer.
    lost = payment_body()
    faults.add("error_after_commit", account_id=lost["account_id"])
    faults.add("lookup_unavailable", account_id=lost["account_id"])
    lost_key = new_key()
    assert post_payment(client, lost, key=lost_key).status_code == 202
    assert post_payment(client, lost, key=lost_key).status_code == 202
    assert faults.remaining() == [], "both rules used up"

    after = _scrape(api.admin_url)

    def grew(name: str, **labels: str) -> float:
        return _metric(after, name, **labels) - _metric(before, name, **labels)

    assert grew("payments_idempotency_conflicts_total", reason="in_progress") == 1
    assert grew("payments_provider_calls_total", operation="lookup", outcome="failed") == 1
    assert grew("payments_provider_calls_total", operation="charge", outcome="unknown") == 1
    assert grew("payments_reconciliations_total", outcome="unknown", source="inline") == 1
    # The backlog gauges are read at most every PAYMENTS_METRICS_BACKLOG_REFRESH_S.
    admin_url = api.admin_url
    wait_until(
        lambda: _metric(_scrape(admin_url), "payments_operations_unknown") >= 1,
        message="the unknown operation in the backlog gauge",
    )
    assert "payments_operations_needs_attention" in after
    assert "payments_oldest_in_flight_operation_age_seconds" in after


def test_a_waiting_request_backs_off_instead_of_polling_every_50_ms(
    api: Process, client: httpx.Client, tenant: TenantHandle, faults: FaultInjector
) -> None:
    assert api.admin_url is not None
    body, key = payment_body(), new_key()
    # The first request is held at the provider for 1.5 s; the second waits for its outcome.
    faults.add("latency", account_id=body["account_id"], delay_s=1.5)
    with api_client(api, tenant) as other, ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(post_payment, other, body, key=key)
        wait_until(
            lambda: client.get("/operations", params={"idempotency_key": key}).status_code == 200,
            message="the first request's claim",
        )
        before = _metric(_scrape(api.admin_url), "payments_wait_polls_total")
        waited = client.post(
            "/payments",
            json=body,
            headers={"Idempotency-Key": key, "Prefer": "wait=10"},
        )
        assert first.result(timeout=30).status_code == 201
    assert waited.status_code == 201, waited.text
    assert waited.headers["idempotent-replayed"] == "true"
    polls = _metric(_scrape(api.admin_url), "payments_wait_polls_total") - before
    # Polling every 50 ms for about 1.5 s would be some 30 reads; backing off to 0.5 s,
    # under 10.
    assert 1 <= polls <= 10, polls


def test_worker_serves_its_own_metrics(
    base_env: dict[str, str],
    work_dir: Path,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    accepted = post_payment(client, body, key=new_key())
    db.execute(
        "UPDATE operations SET next_check_at = now() WHERE id = %s",
        (accepted.json()["operation_id"],),
    )
    port = free_port()
    worker = start_worker(
        work_dir / "logs", {**base_env, "PAYMENTS_WORKER_METRICS_PORT": str(port)}
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def reconciled() -> bool:
            try:
                text = httpx.get(f"{url}/metrics", timeout=2).text
            except httpx.TransportError:
                return False
            return _metric(text, "payments_reconciliations_total", source="worker") >= 1

        wait_until(reconciled, timeout=30, message="the worker's reconciliation metric")
    finally:
        assert worker.stop() in (0, -15), worker.log()
    operation = client.get(f"/operations/{accepted.json()['operation_id']}").json()
    assert operation["state"] == "COMPLETED"


def test_logs_are_json_with_context_and_never_the_raw_key(
    api: Process, client: httpx.Client, tenant: TenantHandle
) -> None:
    key = f"secret-key-{new_key()}"
    created = post_payment(client, payment_body(description="do-not-log-me"), key=key)
    operation_id = created.json()["operation_id"]

    def logged() -> bool:
        # The request's own line is written once the response is sent, after the
        # transitions: wait for it, not for the first line naming the operation.
        return any(
            operation_id in line and '"msg": "request"' in line for line in api.log().splitlines()
        )

    wait_until(logged, timeout=10, message="the request's log line")
    log = api.log()
    assert key not in log
    assert "do-not-log-me" not in log
    lines = [json.loads(line) for line in log.splitlines() if operation_id in line]
    request_lines = [line for line in lines if line["msg"] == "request"]
    assert request_lines, lines
    entry = request_lines[-1]
    assert entry["key_hash"] == key_hash(tenant.id, key)
    assert entry["tenant_id"] == str(tenant.id)
    assert entry["status"] == 201
    assert entry["route"] == "/payments"
    assert any(line["msg"] == "operation transition" for line in lines)
