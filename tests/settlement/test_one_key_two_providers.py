"""One key of ours judged at two providers, and the day run again.

A payment charged at the primary (attempt 0, `payment-<id>`) whose charge there differs
has an `amount_mismatch` at the primary; the same key at the secondary, where it was never
sent, is a stray `orphan` there. Each provider's items are its own: a run locks, updates
and auto-resolves the items of the keys it compared at that provider only. Were the lock
to ignore the provider, each provider's run would auto-resolve the other's item of the key
(it did not find it) and re-open its own, and every re-run of the day would flap them.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.settlement import (
    add_charge,
    at,
    changes,
    edit,
    own_day,
    settle,
    summary,
)
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import payment_for

Db = psycopg.Connection[DictRow]


@pytest.fixture
def second_admin(secondary: Process) -> Iterator[httpx.Client]:
    """The secondary's ledger admin API (`/_ledger`)."""
    assert secondary.url is not None
    with httpx.Client(base_url=secondary.url, timeout=10) as http:
        yield http


def _items(db: Db, key: str) -> dict[tuple[str, str], dict[str, object]]:
    rows = db.execute(
        "SELECT id, provider, kind, state FROM reconciliation_items WHERE provider_key = %s",
        (key,),
    ).fetchall()
    return {(str(row["provider"]), str(row["kind"])): dict(row) for row in rows}


def test_a_day_run_again_keeps_each_providers_items_of_one_key_as_they_are(
    routed: httpx.Client,
    db: Db,
    ledger: httpx.Client,
    second_admin: httpx.Client,
    two_providers: dict[str, str],
    base_env: dict[str, str],
) -> None:
    day = own_day()
    created = post_payment(routed, payment_body(), key=new_key())
    assert created.status_code == 201, created.text
    payment = payment_for(db, created.json()["operation_id"])
    assert (payment["status"], payment["attempt"]) == ("SUCCEEDED", 0)
    key = str(payment["provider_key"])
    db.execute("UPDATE payments SET created_at = %s WHERE id = %s", (at(day), payment["id"]))
    edit(
        ledger,
        "charges",
        str(payment["provider_charge_id"]),
        created_at=at(day).isoformat(),
        amount_minor=999,
    )
    add_charge(second_admin, key, at(day, 60))
    env = {**base_env, **two_providers}

    first = summary(settle(env, day))

    assert first["found"] == {"amount_mismatch": 1, "orphan": 1}
    assert (first["opened"], first["auto_resolved"]) == (2, 0)
    items = _items(db, key)
    assert set(items) == {("primary", "amount_mismatch"), ("secondary", "orphan")}
    assert {str(item["state"]) for item in items.values()} == {"open"}

    for _ in range(2):
        again = summary(settle(env, day))

        assert again["found"] == {"amount_mismatch": 1, "orphan": 1}
        assert (again["opened"], again["reopened"], again["auto_resolved"]) == (0, 0, 0)
        assert _items(db, key) == items
    for item in items.values():
        assert [(c["from_state"], c["to_state"]) for c in changes(db, item["id"])] == [
            (None, "open")
        ]
