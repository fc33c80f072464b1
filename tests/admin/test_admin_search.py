"""The operators' search: every kind of id or key, across tenants, each an index probe.

The plan tests read EXPLAIN of the statement the search runs on the plan tests' seeded
database (`plan_db`), sequential and bitmap scans switched off: a key without its index
shows up as a Seq Scan (migration 0011 adds the indexes).
"""

from __future__ import annotations

import re
import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from app.admin.search import search_sql
from app.payments import search as payment_search
from app.refunds import search as refund_search
from tests.support.factories.payments import new_account, new_key, payment_body, post_payment
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.fixtures.plans import plan

TEXT_INDEXES = (
    "ix_operations_idempotency_key",
    "ix_payments_provider_charge_id",
    "ix_payments_merchant_reference",
    "ix_payments_account_created",
    "uq_payments_provider_key_created_at",
    "ix_refunds_provider_refund_id",
    "uq_refunds_provider_key",
)


def _plan(plan_db: psycopg.Connection[DictRow], text: str) -> str:
    return plan(plan_db, *search_sql(text, limit=50, records=(payment_search, refund_search)))


def _probes_every_day_of_events(plan_text: str) -> None:
    """An event's id names no day: each of the events' partitions is probed by its primary
    key (docs/scaling.md, "Time partitions"), none scanned (the plan names each partition's
    index by its table's)."""
    scans = re.findall(r"Scan using (\S+) on (events_\w+)", plan_text)
    assert len(scans) > 1, plan_text
    assert all(index == "pk_events" for index, _part in scans), plan_text


def test_every_kind_of_key_is_an_index_probe(plan_db: psycopg.Connection[DictRow]) -> None:
    by_text = _plan(plan_db, "order-1042")
    for index in TEXT_INDEXES:
        assert index in by_text, f"{index} not used:\n{by_text}"
    assert "Seq Scan" not in by_text, by_text

    as_uuid = _plan(plan_db, str(uuid.uuid4()))
    for pkey in ("pk_operations", "pk_payments", "pk_refunds"):
        assert pkey in as_uuid, as_uuid
    _probes_every_day_of_events(as_uuid)
    assert "Seq Scan" not in as_uuid, as_uuid
    by_prefix = _plan(plan_db, "evt_" + uuid.uuid4().hex)
    _probes_every_day_of_events(by_prefix)
    by_prefix += _plan(plan_db, "wd_" + uuid.uuid4().hex)
    assert "pk_webhook_deliveries" in by_prefix
    assert "Seq Scan" not in by_prefix, by_prefix


def test_the_admin_api_finds_a_customers_two_charges_by_its_order(
    client: httpx.Client, admin_client: httpx.Client, db: psycopg.Connection[DictRow]
) -> None:
    order = f"order-{uuid.uuid4().hex[:8]}"
    account = new_account()
    first = post_payment(client, payment_body(merchant_reference=order, account_id=account),
                         key=new_key()).json()  # fmt: skip
    second = post_payment(client, payment_body(merchant_reference=order, account_id=account),
                          key=new_key()).json()  # fmt: skip
    found = admin_client.get("/admin/search", params={"q": order})
    assert found.status_code == 200
    hits = found.json()["data"]
    assert [(h["kind"], h["matched"]) for h in hits] == [("payment", "merchant_reference")] * 2
    # Newest first.
    assert [h["id"] for h in hits] == [second["payment_id"], first["payment_id"]]
    assert hits[0]["amount_minor"] == 1000
    assert hits[0]["currency"] == "EUR"

    refund = post_refund(client, first["payment_id"], refund_body(), key=new_key()).json()
    provider_refund = refund["provider_refund_id"]
    by_refund = admin_client.get("/admin/search", params={"q": provider_refund}).json()["data"]
    assert [(h["kind"], h["id"]) for h in by_refund] == [("refund", refund["refund_id"])]

    events = admin_client.get(f"/admin/operations/{first['operation_id']}").json()["events"]
    by_event = admin_client.get("/admin/search", params={"q": events[0]["id"]}).json()["data"]
    assert [(h["kind"], h["id"], h["operation_id"]) for h in by_event] == [
        ("event", events[0]["id"], first["operation_id"])
    ]
    delivery_id = "wd_" + uuid.uuid4().hex
    assert admin_client.get("/admin/search", params={"q": delivery_id}).json() == {"data": []}

    unknown = admin_client.get("/admin/search", params={"q": "no-such-key"})
    assert unknown.json() == {"data": []}
    refused = admin_client.get("/admin/search", params={"q": order, "tenant": "x"})
    assert refused.status_code == 422
    with httpx.Client(base_url=str(admin_client.base_url)) as anonymous:
        assert anonymous.get("/admin/search", params={"q": order}).status_code == 401


def test_a_later_attempts_key_finds_its_payment(
    client: httpx.Client,
    admin_client: httpx.Client,
    db: psycopg.Connection[DictRow],
    plan_db: psycopg.Connection[DictRow],
) -> None:
    created = post_payment(client, payment_body(), key=new_key()).json()
    stored = db.execute(
        "SELECT provider_key FROM payments WHERE id = %s", (created["payment_id"],)
    ).fetchone()
    assert stored is not None
    # The key another provider would hold after a failover (docs/architecture.md).
    found = admin_client.get("/admin/search", params={"q": f"{stored['provider_key']}:1"})
    assert [(h["kind"], h["matched"], h["id"]) for h in found.json()["data"]] == [
        ("payment", "provider_key", created["payment_id"])
    ]
    for not_a_key in (":1", f"{stored['provider_key']}:0", f"{stored['provider_key']}:01"):
        assert admin_client.get("/admin/search", params={"q": not_a_key}).json() == {"data": []}
    # The statement is the same whatever the key: its plan is read on the seeded database.
    explained = _plan(plan_db, f"{stored['provider_key']}:2")
    assert "uq_payments_provider_key_created_at" in explained
    assert "Seq Scan" not in explained, explained
