"""`payments settle` over two providers' books, with real processes: the session's fake
provider as `primary`, one of this module's own as `secondary`, and an API routed to both
(every payment: primary, then secondary), as tests/failover starts them.

A payment fails over when the primary declines it with a code retryable elsewhere (the
decline stays at the primary under attempt 0's key) or refuses its only send (nothing stays
there); its charge is then the secondary's, under attempt 1's key, and so are its refunds.
Each test moves the records it made onto a day of its own on every side (`own_day`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.settlement.queue import DiscrepancyQueue
from app.settlement.views import detail_json
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.settlement import (
    add_charge,
    at,
    by_key,
    edit,
    items,
    move_refund,
    own_day,
    settle,
    summary,
)
from tests.support.control.system import PROVIDER_AUTH
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.fixtures.repository import AsyncDb
from tests.support.readers.operations import payment_for

Db = psycopg.Connection[DictRow]
Row = dict[str, Any]


@pytest.fixture
def second_ledger(secondary: Process) -> Iterator[httpx.Client]:
    assert secondary.url is not None
    with httpx.Client(base_url=secondary.url, timeout=10, headers=PROVIDER_AUTH) as http:
        yield http


def pay(routed: httpx.Client, db: Db, faults: FaultInjector | None = None, how: str = "") -> Row:
    """A payment through the routed API, as its row reads: failed over to the secondary when
    `how` names the primary's fault (`decline`: declined `processor_declined`, retryable
    elsewhere; `unavailable`: its only send refused), charged at the primary otherwise."""
    body = payment_body()
    if how == "decline":
        assert faults is not None
        faults.add("decline", account_id=body["account_id"], decline_code="processor_declined")
    elif how == "unavailable":
        assert faults is not None
        faults.add("unavailable", account_id=body["account_id"])
    created = post_payment(routed, body, key=new_key())
    assert created.status_code == 201, created.text
    payment = payment_for(db, created.json()["operation_id"])
    assert payment["route"] == ["primary", "secondary"]
    assert (payment["status"], payment["attempt"]) == ("SUCCEEDED", 1 if how else 0)
    payment["account_id"] = body["account_id"]
    return payment


def held(ledger: httpx.Client, key: str) -> Row | None:
    """The charge a provider holds under `key`, if any (its lookup by key)."""
    found = ledger.get("/charges", params={"idempotency_key": key})
    if found.status_code == 404:
        return None
    assert found.status_code == 200, found.text
    charge: Row = found.json()
    return charge


def place(db: Db, ledgers: dict[str, httpx.Client], payment: Row, when: datetime) -> None:
    """Our payment, and every charge either provider holds under its attempts' keys, made
    at `when`."""
    db.execute("UPDATE payments SET created_at = %s WHERE id = %s", (when, payment["id"]))
    key = str(payment["provider_key"])
    for ledger in ledgers.values():
        for attempt_key in (key, f"{key}:1"):
            charge = held(ledger, attempt_key)
            if charge is not None:
                edit(ledger, "charges", str(charge["charge_id"]), created_at=when.isoformat())


def lines_of(db: Db, payment_ids: list[object]) -> list[Row]:
    return db.execute(
        "SELECT payment_id, refund_id, provider_key, gross_minor FROM settlement_lines"
        " WHERE payment_id = ANY(%s) ORDER BY provider_key",
        (payment_ids,),
    ).fetchall()


def item_at(db: Db, provider: str, key: str) -> dict[str, Row]:
    """The items of one key at one provider, by kind."""
    rows = db.execute(
        "SELECT * FROM reconciliation_items WHERE provider = %s AND provider_key = %s",
        (provider, key),
    )
    return {row["kind"]: row for row in rows.fetchall()}


def test_a_day_of_payments_failed_over_to_the_secondary_settles_with_nothing_queued(
    routed: httpx.Client,
    db: Db,
    faults: FaultInjector,
    ledger: httpx.Client,
    second_ledger: httpx.Client,
    two_providers: dict[str, str],
    base_env: dict[str, str],
) -> None:
    day = own_day()
    declined = pay(routed, db, faults, "decline")
    refused = pay(routed, db, faults, "unavailable")
    stayed = pay(routed, db)
    ledgers = {"primary": ledger, "secondary": second_ledger}
    for payment in (declined, refused, stayed):
        place(db, ledgers, payment, at(day))
    # What the failovers left at the primary: the decline under attempt 0's key, or nothing.
    decline = held(ledger, str(declined["provider_key"]))
    assert decline is not None
    assert (decline["status"], decline["decline_code"]) == ("declined", "processor_declined")
    assert held(ledger, str(refused["provider_key"])) is None

    run = summary(settle({**base_env, **two_providers}, day))

    assert (run["found"], run["opened"], items(db, day)) == ({}, 0, [])
    assert (run["their_charges"], run["our_payments"]) == (4, 3)
    assert (run["agreed"], run["lines_recorded"], run["looked_up"]) == (3, 3, 0)
    assert (run["failover_declines"], run["foreign"], run["unconfigured"]) == (1, 0, 0)
    nothing_else = {"their_refunds": 0, "our_refunds": 0, "their_captures": 0, "our_captures": 0}
    assert run["by_provider"] == {
        "primary": {"their_charges": 2, "our_payments": 1, **nothing_else},
        "secondary": {"their_charges": 2, "our_payments": 2, **nothing_else},
    }
    # Each payment's settled line is the charge its outcome came from.
    lines = lines_of(db, [declined["id"], refused["id"], stayed["id"]])
    assert sorted(str(line["provider_key"]) for line in lines) == sorted(
        [f"{declined['provider_key']}:1", f"{refused['provider_key']}:1", stayed["provider_key"]]
    )
    again = summary(settle({**base_env, **two_providers}, day))
    assert (again["found"], again["opened"], again["lines_recorded"]) == ({}, 0, 0)


def test_a_charge_under_attempt_0s_key_of_a_payment_charged_at_the_secondary_is_an_orphan(
    routed: httpx.Client,
    db: Db,
    faults: FaultInjector,
    ledger: httpx.Client,
    second_ledger: httpx.Client,
    two_providers: dict[str, str],
    base_env: dict[str, str],
) -> None:
    day = own_day()
    refused = pay(routed, db, faults, "unavailable")
    declined = pay(routed, db, faults, "decline")
    ledgers = {"primary": ledger, "secondary": second_ledger}
    for payment in (refused, declined):
        place(db, ledgers, payment, at(day))
    # The double charge settlement exists to catch: the primary charged attempt 0 after all
    # (a "not processed" that was wrong), or its decline turned out to be a charge.
    add_charge(
        ledger,
        str(refused["provider_key"]),
        at(day, 60),
        amount_minor=1000,
        account_id=str(refused["account_id"]),
    )
    decline = held(ledger, str(declined["provider_key"]))
    assert decline is not None
    edit(ledger, "charges", str(decline["charge_id"]), status="succeeded")

    run = summary(settle({**base_env, **two_providers}, day))

    assert run["found"] == {"orphan": 2}
    assert (run["agreed"], run["failover_declines"]) == (2, 0)
    for payment in (refused, declined):
        key = str(payment["provider_key"])
        assert set(item_at(db, "primary", key)) == {"orphan"}
        assert item_at(db, "secondary", f"{key}:1") == {}
        orphan = item_at(db, "primary", key)["orphan"]
        assert orphan["state"] == "open"
        assert orphan["detail"] == (
            "the provider made this charge under attempt 0's key; the payment is SUCCEEDED at"
            " attempt 1, at secondary: a second charge"
        )
        assert (orphan["payment_id"], orphan["tenant_id"]) == (payment["id"], payment["tenant_id"])
        assert orphan["ours"]["route"] == ["primary", "secondary"]
        assert (orphan["ours"]["attempt"], orphan["ours"]["status"]) == (1, "SUCCEEDED")
        assert orphan["theirs"]["status"] == "succeeded"
    # Both charges settled, and both are the payment's.
    assert len(lines_of(db, [refused["id"], declined["id"]])) == 4

    again = summary(settle({**base_env, **two_providers}, day))
    assert (again["found"], again["opened"]) == ({"orphan": 2}, 0)


def test_a_key_of_ours_at_a_provider_it_was_never_sent_to_is_an_orphan(
    routed: httpx.Client,
    db: Db,
    faults: FaultInjector,
    ledger: httpx.Client,
    second_ledger: httpx.Client,
    two_providers: dict[str, str],
    base_env: dict[str, str],
) -> None:
    day = own_day()
    stayed = pay(routed, db)
    moved = pay(routed, db, faults, "unavailable")
    ledgers = {"primary": ledger, "secondary": second_ledger}
    for payment in (stayed, moved):
        place(db, ledgers, payment, at(day))
    # Attempt 0's key at the secondary, attempt 1's (declined) at the primary, and an
    # attempt's key of a payment we have no row for.
    add_charge(second_ledger, str(stayed["provider_key"]), at(day, 60))
    add_charge(ledger, f"{moved['provider_key']}:1", at(day, 60), status="declined")
    stranger = f"payment-{uuid.uuid4()}:1"
    add_charge(second_ledger, stranger, at(day, 60))
    add_charge(second_ledger, "not-ours:1", at(day, 60))

    run = summary(settle({**base_env, **two_providers}, day))

    assert run["found"] == {"orphan": 3}
    assert (run["agreed"], run["foreign"]) == (2, 1)
    wrong = item_at(db, "secondary", str(stayed["provider_key"]))["orphan"]
    assert wrong["detail"] == (
        "the provider made this charge under attempt 0's key, sent only to primary, never"
        " here (money taken); the payment is SUCCEEDED at attempt 0, at primary"
    )
    assert wrong["payment_id"] == stayed["id"]
    assert set(item_at(db, "primary", str(stayed["provider_key"]))) == set()
    declined = item_at(db, "primary", f"{moved['provider_key']}:1")["orphan"]
    assert "sent only to secondary, never here (declined: nothing taken)" in declined["detail"]
    unknown = item_at(db, "secondary", stranger)["orphan"]
    assert (unknown["ours"], unknown["payment_id"]) == (None, None)
    assert unknown["detail"] == "the provider made this charge; we have no record"


def test_a_refund_at_the_secondary_matches_there_and_differs_there(
    routed: httpx.Client,
    db: Db,
    faults: FaultInjector,
    ledger: httpx.Client,
    second_ledger: httpx.Client,
    second_faults: FaultInjector,
    two_providers: dict[str, str],
    base_env: dict[str, str],
    async_db: AsyncDb,
) -> None:
    day = own_day()
    agreeing = pay(routed, db, faults, "unavailable")
    changed = pay(routed, db, faults, "decline")
    ledgers = {"primary": ledger, "secondary": second_ledger}
    refunds = []
    for payment in (agreeing, changed):
        made = post_refund(routed, str(payment["id"]), refund_body(amount="4.00"), key=new_key())
        assert made.status_code == 201, made.text
        refunds.append(made.json()["refund_id"])
        place(db, ledgers, payment, at(day))
    for refund_id in refunds:
        move_refund(db, second_ledger, refund_id, at(day, 50_000))
    rows = {
        str(row["id"]): row
        for row in db.execute(
            "SELECT id, provider, provider_key, provider_refund_id FROM refunds"
            " WHERE id = ANY(%s::uuid[])",
            (refunds,),
        ).fetchall()
    }
    assert {row["provider"] for row in rows.values()} == {"secondary"}
    assert faults.refunds(charge_id=agreeing["provider_charge_id"]) == []
    edit(second_ledger, "refunds", str(rows[refunds[1]]["provider_refund_id"]), amount_minor=150)

    run = summary(settle({**base_env, **two_providers}, day))

    assert (run["their_refunds"], run["our_refunds"]) == (2, 2)
    assert run["by_provider"]["secondary"]["their_refunds"] == 2
    assert run["by_provider"]["primary"]["their_refunds"] == 0
    assert run["found"] == {"amount_mismatch": 1, "status_mismatch": 1}
    assert by_key(db, str(rows[refunds[0]]["provider_key"])) == {}
    refund_item = item_at(db, "secondary", str(rows[refunds[1]]["provider_key"]))
    assert set(refund_item) == {"amount_mismatch"}
    # The charge says less was refunded of it than we recorded: at the secondary too.
    assert set(item_at(db, "secondary", f"{changed['provider_key']}:1")) == {"status_mismatch"}
    line = db.execute(
        "SELECT gross_minor, fee_minor FROM settlement_lines WHERE refund_id = %s",
        (refunds[0],),
    ).fetchone()
    assert line == {"gross_minor": -400, "fee_minor": 0}
    # The queue's views name the provider.
    shown = detail_json(
        async_db.run(DiscrepancyQueue(async_db.db).read(refund_item["amount_mismatch"]["id"]))
    )
    assert (shown["provider"], shown["record_type"]) == ("secondary", "refund")
    assert second_faults.refunds(charge_id=agreeing["provider_charge_id"])


def test_records_held_by_a_provider_no_longer_configured_are_counted_not_compared(
    routed: httpx.Client,
    db: Db,
    faults: FaultInjector,
    ledger: httpx.Client,
    second_ledger: httpx.Client,
    base_env: dict[str, str],
) -> None:
    day: date = own_day()
    moved = pay(routed, db, faults, "decline")
    place(db, {"primary": ledger, "secondary": second_ledger}, moved, at(day))

    # The primary alone, as a deployment that dropped the secondary would run it.
    run = summary(settle(base_env, day))

    assert (run["found"], items(db, day)) == ({}, [])
    assert (run["unconfigured"], run["failover_declines"], run["our_payments"]) == (1, 1, 1)
    assert run["by_provider"] == {
        "primary": {
            "their_charges": 1,
            "our_payments": 0,
            "their_refunds": 0,
            "our_refunds": 0,
            "their_captures": 0,
            "our_captures": 0,
        }
    }
