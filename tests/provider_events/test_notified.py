"""The fake provider's own notifications, end to end: signed by the provider, received by
the API's inbox, applied by the worker. Recovery checks are an hour apart here, so what
settles a lost answer within the test is the provider's notification alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.provider_events.test_apply import SLOW_RECOVERY
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.provider_events import new_secret, secrets_setting
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import operation


@dataclass(frozen=True)
class Notified:
    client: httpx.Client
    faults: FaultInjector
    provider_url: str


@pytest.fixture
def notified(spawn: Spawner, work_dir: Path, tenant: TenantHandle) -> Iterator[Notified]:
    secret = new_secret()
    provider = spawn.provider(work_dir / f"notified-{uuid.uuid4().hex[:8]}.sqlite3")
    assert provider.url is not None
    settings = {
        "PAYMENTS_PROVIDER_URL": provider.url,
        **secrets_setting({"primary": [secret]}),
        **SLOW_RECOVERY,
    }
    api = spawn.api(**settings)
    spawn.worker(once=False, **settings)
    assert api.url is not None
    configured = httpx.put(
        f"{provider.url}/_notifications",
        json={"url": f"{api.url}/provider-events/primary", "secret": secret},
        timeout=10,
    )
    assert configured.status_code == 200, configured.text
    with api_client(api, tenant) as client:
        yield Notified(client, FaultInjector(provider.url), provider.url)


def _events(db: psycopg.Connection[DictRow], key: str) -> list[DictRow]:
    return db.execute(
        "SELECT * FROM provider_events WHERE provider_key = %s ORDER BY id", (key,)
    ).fetchall()


def _provider_key(db: psycopg.Connection[DictRow], payment_id: str) -> str:
    row = db.execute("SELECT provider_key FROM payments WHERE id = %s", (payment_id,)).fetchone()
    assert row is not None
    key: str = row["provider_key"]
    return key


def _all_applied(db: psycopg.Connection[DictRow], key: str, count: int) -> None:
    def done() -> bool:
        rows = _events(db, key)
        return len(rows) >= count and all(r["state"] == "applied" for r in rows)

    wait_until(done, timeout=30, message=f"{count} notifications applied")


def test_a_lost_answer_is_settled_by_the_providers_notification(
    notified: Notified, db: psycopg.Connection[DictRow]
) -> None:
    body = payment_body()
    notified.faults.add("drop_after_commit", account_id=body["account_id"])
    lost = post_payment(notified.client, body, key=new_key())
    assert lost.status_code == 202, lost.text
    operation_id = lost.json()["operation_id"]
    key = _provider_key(db, lost.json()["payment_id"])
    wait_until(
        lambda: operation(db, operation_id)["state"] == "COMPLETED",
        timeout=30,
        message="the notification to settle the payment",
    )
    _all_applied(db, key, 1)
    assert len(notified.faults.charges(idempotency_key=key)) == 1


def test_an_event_sent_before_the_answer_and_duplicates_make_one_payment(
    notified: Notified, db: psycopg.Connection[DictRow]
) -> None:
    body = payment_body()
    notified.faults.add("notify_early", account_id=body["account_id"])
    notified.faults.add("notify_duplicate", account_id=body["account_id"], copies=3)
    paid = post_payment(notified.client, body, key=new_key())
    assert paid.status_code == 201, paid.text
    key = _provider_key(db, paid.json()["payment_id"])
    _all_applied(db, key, 1)
    events = db.execute(
        "SELECT type FROM events WHERE operation_id = %s", (paid.json()["operation_id"],)
    ).fetchall()
    assert [e["type"] for e in events] == ["payment.succeeded"]
    assert len(notified.faults.charges(idempotency_key=key)) == 1


def test_an_event_for_a_key_never_sent_is_kept_unmatched(
    notified: Notified, db: psycopg.Connection[DictRow]
) -> None:
    body = payment_body()
    notified.faults.add("notify_unknown_key", account_id=body["account_id"])
    paid = post_payment(notified.client, body, key=new_key())
    assert paid.status_code == 201, paid.text
    made_up = [
        e
        for e in httpx.get(f"{notified.provider_url}/_notifications/events", timeout=10).json()[
            "events"
        ]
        if e["made_up"]
    ]
    assert len(made_up) == 1, made_up
    stranger = made_up[0]["idempotency_key"]
    assert stranger != _provider_key(db, paid.json()["payment_id"])

    def parked() -> bool:
        rows = _events(db, stranger)
        return bool(rows) and rows[0]["state"] == "parked"

    wait_until(parked, timeout=30, message="the stranger parked")
    assert _events(db, stranger)[0]["reason"] == "no operation under its key yet"
