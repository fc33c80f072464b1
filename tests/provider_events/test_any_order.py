"""Whatever order a provider's events of one payment arrive in, however often each comes:
the payment ends as the provider holds it, and each transition emits exactly one event (and
one webhook delivery per endpoint).

A payment's charge is answered; its refunds' answers are lost (202), so only their events
can settle them here (recovery checks are an hour apart). Hypothesis draws an order of the
charge's and the refunds' events, each delivered one to three times, all sent before the
worker looks; every example is a new payment on the same API and worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import DictRow

from tests.provider_events.conftest import SECRET
from tests.provider_events.test_apply import SLOW_RECOVERY
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.provider_events import deliver, event, raw, secrets_setting
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.factories.webhooks import create_endpoint

REFUNDS = ("3.00", "2.00", "1.00")


@pytest.fixture
def system(spawn: Spawner, tenant: TenantHandle) -> Iterator[tuple[Process, httpx.Client]]:
    settings_ = {
        **secrets_setting({"primary": [SECRET]}),
        **SLOW_RECOVERY,
        "PAYMENTS_WEBHOOKS_ALLOW_LOCAL": "1",
    }
    api = spawn.api(**settings_)
    spawn.worker(once=False, **settings_)
    with api_client(api, tenant) as client:
        create_endpoint(client, "http://127.0.0.1:9/hooks")
        yield api, client


def _a_payment_with_lost_refunds(
    client: httpx.Client, faults: FaultInjector, db: psycopg.Connection[DictRow]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    body = payment_body()
    paid = post_payment(client, body, key=new_key())
    assert paid.status_code == 201, paid.text
    refunds = []
    for amount in REFUNDS:
        faults.add("drop_after_commit", account_id=body["account_id"])
        lost = post_refund(
            client, paid.json()["payment_id"], refund_body(amount=amount), key=new_key()
        )
        assert lost.status_code == 202, lost.text
        refunds.append(lost.json())
    return paid.json(), refunds


def _key(db: psycopg.Connection[DictRow], table: str, operation_id: str) -> str:
    row = db.execute(
        f"SELECT provider_key FROM {table} WHERE operation_id = %s",
        (operation_id,),
    ).fetchone()
    assert row is not None
    key: str = row["provider_key"]
    return key


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    order=st.permutations(range(1 + len(REFUNDS))),
    copies=st.lists(st.integers(1, 3), min_size=1 + len(REFUNDS), max_size=1 + len(REFUNDS)),
)
def test_events_in_any_order_and_number_settle_the_payment_once(
    system: tuple[Process, httpx.Client],
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
    order: list[int],
    copies: list[int],
) -> None:
    api, client = system
    assert api.url is not None
    payment, refunds = _a_payment_with_lost_refunds(client, faults, db)
    events = [
        event(
            type="charge.succeeded",
            data={"object": {"idempotency_key": _key(db, "payments", payment["operation_id"])}},
        )
    ] + [
        event(
            type="refund.succeeded",
            data={"object": {"idempotency_key": _key(db, "refunds", r["operation_id"])}},
        )
        for r in refunds
    ]
    sends = [events[i] for i in order for _ in range(copies[i])]
    for sent in sends:
        assert deliver(api.url, "primary", raw(sent), signed_with=[SECRET]).status_code == 200

    operations = [payment["operation_id"], *(r["operation_id"] for r in refunds)]

    def settled() -> bool:
        states = db.execute(
            "SELECT state FROM operations WHERE id = ANY(%s)", (operations,)
        ).fetchall()
        return all(s["state"] == "COMPLETED" for s in states)

    wait_until(settled, timeout=30, message="every operation settled by its events")
    # The provider's true state: charged once, each refund made once.
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_refunded"]) == ("PARTIALLY_REFUNDED", "6.00")
    assert len(faults.charges(reference=payment["payment_id"])) == 1
    for refund in refunds:
        key = _key(db, "refunds", refund["operation_id"])
        assert len(faults.refunds(idempotency_key=key)) == 1
    # One event per transition, and one webhook delivery of each to the one endpoint.
    written = db.execute(
        "SELECT e.type, count(d.id) AS deliveries FROM events e"
        " LEFT JOIN webhook_deliveries d ON d.event_id = e.id"
        " WHERE e.operation_id = ANY(%s) GROUP BY e.id, e.type ORDER BY e.type",
        (operations,),
    ).fetchall()
    assert [(w["type"], w["deliveries"]) for w in written] == [
        ("payment.succeeded", 1),
        *(("refund.succeeded", 1) for _ in REFUNDS),
    ]
    # Every event was kept once, and every one applied.
    kept = db.execute(
        "SELECT state, count(*) AS n FROM provider_events WHERE event_id = ANY(%s) GROUP BY state",
        ([e["id"] for e in events],),
    ).fetchall()
    assert [(k["state"], k["n"]) for k in kept] == [("applied", len(events))]
