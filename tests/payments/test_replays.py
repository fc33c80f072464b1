"""Later requests with the same scoped key: replay, reuse, in flight, tenants."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant


def _count_operations(db: psycopg.Connection[DictRow], tenant_id: object) -> int:
    row = db.execute("SELECT count(*) AS n FROM operations WHERE tenant_id = %s", (tenant_id,))
    result = row.fetchone()
    assert result is not None
    return int(result["n"])


def test_replay_is_byte_identical_and_marked(client: httpx.Client, faults: FaultInjector) -> None:
    key, body = new_key(), payment_body()
    first = post_payment(client, body, key=key)
    second = post_payment(client, body, key=key)

    assert first.status_code == second.status_code == 201
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["location"] == first.headers["location"]
    assert len(faults.charges(account_id=body["account_id"])) == 1


def test_reordered_members_whitespace_and_currency_case_replay(client: httpx.Client) -> None:
    key = new_key()
    body = payment_body(amount="5.5", currency="usd", metadata={"b": "2", "a": "1"})
    first = post_payment(client, body, key=key)
    assert first.status_code == 201

    reordered = {
        "metadata": {"a": "1", "b": "2"},
        "currency": "USD",
        "merchant_reference": body["merchant_reference"],
        "account_id": body["account_id"],
        "amount": "5.50",
    }
    raw = json.dumps(reordered, indent=4).encode()
    second = client.post(
        "/payments",
        content=raw,
        headers={"Idempotency-Key": f'"{key}"', "Content-Type": "application/json"},
    )
    assert second.status_code == 201, second.text
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"


def test_same_key_different_amount_is_422_and_changes_nothing(
    client: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    key, body = new_key(), payment_body()
    first = post_payment(client, body, key=key)
    before = db.execute(
        "SELECT state, fingerprint, updated_at, fence FROM operations WHERE id = %s",
        (first.json()["operation_id"],),
    ).fetchone()

    reused = post_payment(client, {**body, "amount": "10.01"}, key=key)

    assert reused.status_code == 422
    assert reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert reused.json()["operation_id"] == first.json()["operation_id"]
    after = db.execute(
        "SELECT state, fingerprint, updated_at, fence FROM operations WHERE id = %s",
        (first.json()["operation_id"],),
    ).fetchone()
    assert after == before
    assert post_payment(client, body, key=key).content == first.content


def test_same_key_under_two_tenants_makes_two_payments(
    api: Process, client: httpx.Client, db: psycopg.Connection[DictRow], faults: FaultInjector
) -> None:
    key, body = new_key(), payment_body()
    other = make_tenant(db, "other tenant")
    with api_client(api, other) as other_client:
        mine = post_payment(client, body, key=key)
        theirs = post_payment(other_client, body, key=key)
        assert other_client.get(f"/payments/{mine.json()['payment_id']}").status_code == 404
        assert other_client.get(f"/operations/{mine.json()['operation_id']}").status_code == 404
        found = other_client.get("/operations", params={"idempotency_key": key})
        assert found.json()["operation_id"] == theirs.json()["operation_id"]

    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["payment_id"] != theirs.json()["payment_id"]
    assert len(faults.charges(account_id=body["account_id"])) == 2


def test_in_flight_duplicate_gets_409_with_monitor_link(
    client: httpx.Client, faults: FaultInjector
) -> None:
    key, body = new_key(), payment_body()
    faults.add("latency", account_id=body["account_id"], delay_s=1.5)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(post_payment, client, body, key=key)
        # Wait until the first request has claimed the key (the operation exists).
        while client.get("/operations", params={"idempotency_key": key}).status_code == 404:
            pass
        duplicate = post_payment(client, body, key=key)
        original = first.result()

    assert duplicate.status_code == 409, duplicate.text
    problem = duplicate.json()
    assert problem["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert duplicate.headers["retry-after"] == "1"
    assert duplicate.headers["link"] == f'</operations/{problem["operation_id"]}>; rel="monitor"'
    assert original.status_code == 201
    assert len(faults.charges(account_id=body["account_id"])) == 1


def test_prefer_wait_replays_the_outcome_once_it_arrives(
    client: httpx.Client, faults: FaultInjector
) -> None:
    key, body = new_key(), payment_body()
    faults.add("latency", account_id=body["account_id"], delay_s=1.0)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(post_payment, client, body, key=key)
        while client.get("/operations", params={"idempotency_key": key}).status_code == 404:
            pass
        waited = post_payment(client, body, key=key, headers={"Prefer": "wait=10"})
        original = first.result()

    assert original.status_code == 201
    assert waited.status_code == 201, waited.text
    assert waited.content == original.content
    assert waited.headers["idempotent-replayed"] == "true"


def test_fifty_concurrent_identical_requests_charge_once(
    client: httpx.Client,
    faults: FaultInjector,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("latency", account_id=body["account_id"], delay_s=0.3)
    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(lambda _: post_payment(client, body, key=key), range(50)))

    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {201, 409}, statuses
    assert statuses.count(201) >= 1
    # They overlapped: some arrived while the first was still at the provider.
    assert statuses.count(409) >= 1, statuses
    created = [r for r in responses if r.status_code == 201]
    assert len({r.content for r in created}) == 1
    assert len(faults.charges(account_id=body["account_id"])) == 1
    assert _count_operations(db, tenant.id) == 1
