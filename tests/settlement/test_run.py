"""`payments settle` against the real provider process and PostgreSQL: each kind of
difference, the settled lines, paging, the lag, re-runs, and what a run refuses to do.

Each test moves the records it made onto a day of its own (`own_day`) on both sides and
settles that day, so the runs of other tests never see them.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import psycopg
from psycopg.rows import DictRow

from app.clock import utcnow
from tests.support.control.settlement import (
    add_charge,
    at,
    by_key,
    changes,
    drop,
    edit,
    items,
    move_payment,
    move_refund,
    own_day,
    settle,
    summary,
)
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.readers.operations import payment_for

Db = psycopg.Connection[DictRow]


def pay(client: httpx.Client, db: Db, **body: object) -> dict[str, object]:
    """A payment made through the API, as its row reads."""
    created = post_payment(client, payment_body(**body), key=new_key())
    assert created.status_code in (201, 402), created.text
    return payment_for(db, created.json()["operation_id"])


def fee(amount_minor: int) -> int:
    """The fake provider's documented fee: 2.9% rounded half-up, plus 30."""
    return (amount_minor * 29 + 500) // 1000 + 30


def test_a_day_that_agrees_queues_nothing_and_records_fee_and_net_per_payment(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    payments = [pay(client, db, amount=amount) for amount in ("10.00", "12.34", "0.50")]
    refunded = payments[0]
    refund = post_refund(client, str(refunded["id"]), refund_body(amount="4.00"), key=new_key())
    assert refund.status_code == 201, refund.text
    for payment in payments:
        move_payment(db, ledger, str(payment["id"]), at(day))
    move_refund(db, ledger, refund.json()["refund_id"], at(day, 50_000))

    run = summary(settle(base_env, day))

    assert (run["their_charges"], run["our_payments"]) == (3, 3)
    assert (run["their_refunds"], run["our_refunds"]) == (1, 1)
    assert (run["agreed"], run["lines_recorded"], run["found"]) == (4, 4, {})
    assert items(db, day) == []
    lines = db.execute(
        "SELECT payment_id, refund_id, gross_minor, fee_minor, net_minor, payout_id, settled_on"
        " FROM settlement_lines WHERE payment_id = ANY(%s)",
        ([payment["id"] for payment in payments],),
    ).fetchall()
    assert len(lines) == 4
    for line in lines:
        assert line["settled_on"] == day + timedelta(days=1)
        assert line["payout_id"] == f"po_{day + timedelta(days=1):%Y%m%d}_EUR"
        if line["refund_id"] is None:
            assert line["fee_minor"] == fee(line["gross_minor"])
            assert line["net_minor"] == line["gross_minor"] - line["fee_minor"]
        else:
            assert (line["gross_minor"], line["fee_minor"], line["net_minor"]) == (-400, 0, -400)
    again = summary(settle(base_env, day))
    assert (again["lines_recorded"], again["opened"]) == (0, 0)


def test_each_kind_of_charge_difference_is_queued_once_with_both_sides(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    missing, amount, currency, status, fine = (pay(client, db) for _ in range(5))
    declined_here = pay(client, db, account_id="acc_decline_insufficient_funds")
    assert declined_here["status"] == "DECLINED"
    for payment in (missing, amount, currency, status, fine, declined_here):
        move_payment(db, ledger, str(payment["id"]), at(day))
    drop(ledger, "charges", str(missing["provider_charge_id"]))
    edit(ledger, "charges", str(amount["provider_charge_id"]), amount_minor=999)
    edit(ledger, "charges", str(currency["provider_charge_id"]), currency="USD")
    edit(ledger, "charges", str(status["provider_charge_id"]), status="declined")
    edit(ledger, "charges", str(declined_here["provider_charge_id"]), status="succeeded")
    orphan_key = f"payment-{uuid.uuid4()}"
    add_charge(ledger, orphan_key, at(day, 3600), amount_minor=2500)
    add_charge(ledger, "someone-elses-key-1", at(day, 3600))

    run = summary(settle(base_env, day))

    assert run["found"] == {
        "amount_mismatch": 1,
        "currency_mismatch": 1,
        "missing": 1,
        "orphan": 1,
        "status_mismatch": 2,
    }
    assert (run["opened"], run["foreign"], run["looked_up"]) == (6, 1, 1)
    queued = {(row["provider_key"], row["kind"]): row for row in items(db, day)}
    assert set(queued) == {
        (missing["provider_key"], "missing"),
        (amount["provider_key"], "amount_mismatch"),
        (currency["provider_key"], "currency_mismatch"),
        (status["provider_key"], "status_mismatch"),
        (declined_here["provider_key"], "status_mismatch"),
        (orphan_key, "orphan"),
    }
    assert all(row["state"] == "open" for row in queued.values())
    wrong_amount = queued[(amount["provider_key"], "amount_mismatch")]
    assert (wrong_amount["ours"]["amount_minor"], wrong_amount["theirs"]["amount_minor"]) == (
        1000,
        999,
    )
    assert wrong_amount["payment_id"] == amount["id"]
    assert wrong_amount["tenant_id"] == amount["tenant_id"]
    orphan = queued[(orphan_key, "orphan")]
    assert (orphan["ours"], orphan["theirs"]["amount_minor"], orphan["payment_id"]) == (
        None,
        2500,
        None,
    )
    assert queued[(missing["provider_key"], "missing")]["theirs"] is None
    for row in queued.values():
        assert [(c["from_state"], c["to_state"]) for c in changes(db, row["id"])] == [
            (None, "open")
        ]

    again = summary(settle(base_env, day))
    assert (again["opened"], again["found"]) == (0, run["found"])
    assert len(items(db, day)) == 6


def test_refund_differences_and_a_refunded_amount_that_differs(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    first, second = pay(client, db), pay(client, db)
    lost = post_refund(client, str(first["id"]), refund_body(amount="3.00"), key=new_key())
    changed = post_refund(client, str(second["id"]), refund_body(amount="2.00"), key=new_key())
    assert (lost.status_code, changed.status_code) == (201, 201)
    for payment in (first, second):
        move_payment(db, ledger, str(payment["id"]), at(day))
    for refund in (lost.json(), changed.json()):
        move_refund(db, ledger, refund["refund_id"], at(day, 60_000))
    provider_ids = {
        row["id"]: row["provider_refund_id"]
        for row in db.execute(
            "SELECT id::text, provider_refund_id FROM refunds WHERE id = ANY(%s::uuid[])",
            ([lost.json()["refund_id"], changed.json()["refund_id"]],),
        ).fetchall()
    }
    drop(ledger, "refunds", provider_ids[lost.json()["refund_id"]])
    edit(ledger, "refunds", provider_ids[changed.json()["refund_id"]], amount_minor=150)

    run = summary(settle(base_env, day))

    lost_key = db.execute(
        "SELECT provider_key FROM refunds WHERE id = %s", (lost.json()["refund_id"],)
    ).fetchone()
    changed_key = db.execute(
        "SELECT provider_key FROM refunds WHERE id = %s", (changed.json()["refund_id"],)
    ).fetchone()
    assert lost_key is not None
    assert changed_key is not None
    assert set(by_key(db, lost_key["provider_key"])) == {"missing"}
    assert set(by_key(db, changed_key["provider_key"])) == {"amount_mismatch"}
    # The charges now say less was refunded of them than we recorded: their status differs.
    assert set(by_key(db, str(first["provider_key"]))) == {"status_mismatch"}
    assert set(by_key(db, str(second["provider_key"]))) == {"status_mismatch"}
    assert run["found"] == {"amount_mismatch": 1, "missing": 1, "status_mismatch": 2}


def test_a_fixed_difference_auto_resolves_and_a_resolved_one_stays_resolved(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    fixed, kept = pay(client, db), pay(client, db)
    for payment in (fixed, kept):
        move_payment(db, ledger, str(payment["id"]), at(day))
        edit(ledger, "charges", str(payment["provider_charge_id"]), amount_minor=1)
    settle(base_env, day)
    item = by_key(db, str(fixed["provider_key"]))["amount_mismatch"]
    closed = by_key(db, str(kept["provider_key"]))["amount_mismatch"]
    db.execute(
        "UPDATE reconciliation_items SET state = 'resolved', resolved_by = 'ops',"
        " resolution_reason = 'refunded the difference by hand' WHERE id = %s",
        (closed["id"],),
    )
    edit(ledger, "charges", str(fixed["provider_charge_id"]), amount_minor=1000)

    run = summary(settle(base_env, day))

    assert (run["auto_resolved"], run["kept_closed"], run["opened"]) == (1, 1, 0)
    assert by_key(db, str(fixed["provider_key"]))["amount_mismatch"]["state"] == "auto_resolved"
    assert by_key(db, str(kept["provider_key"]))["amount_mismatch"]["state"] == "resolved"
    trail = changes(db, item["id"])
    assert [(c["from_state"], c["to_state"], c["reason"]) for c in trail[1:]] == [
        ("open", "auto_resolved", "no longer differs")
    ]
    assert trail[1]["actor"].startswith("settle:")

    # The difference comes back: the same item opens again, nothing is added.
    edit(ledger, "charges", str(fixed["provider_charge_id"]), amount_minor=7)
    again = summary(settle(base_env, day))
    assert (again["reopened"], again["opened"]) == (1, 0)
    assert by_key(db, str(fixed["provider_key"]))["amount_mismatch"]["state"] == "open"
    assert len(items(db, day)) == 2


def test_records_inside_the_settlement_lag_are_expected_then_settle(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    # A day to come: its records settle the day after it, which no report covers yet.
    later = utcnow().date() + timedelta(days=3 + uuid.uuid4().int % 5000)
    payment = pay(client, db)
    move_payment(db, ledger, str(payment["id"]), at(later))

    run = summary(settle(base_env, later))

    assert (run["found"], run["lines_recorded"]) == ({"expected": 1}, 0)
    expected = by_key(db, str(payment["provider_key"]))["expected"]
    assert expected["state"] == "open"

    # Both sides moved back onto a day long settled: the run of that day settles the
    # record, records its line and closes the expectation.
    past = own_day()
    move_payment(db, ledger, str(payment["id"]), at(past))
    settled = summary(settle(base_env, past))
    assert (settled["auto_resolved"], settled["lines_recorded"], settled["found"]) == (1, 1, {})
    assert by_key(db, str(payment["provider_key"]))["expected"]["state"] == "auto_resolved"
    assert [c["reason"] for c in changes(db, expected["id"])][-1] == "settled"


def test_paging_reads_every_record_of_the_day(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    payments = [pay(client, db) for _ in range(23)]
    for n, payment in enumerate(payments):
        move_payment(db, ledger, str(payment["id"]), at(day, 1000 + n))
    edit(ledger, "charges", str(payments[-1]["provider_charge_id"]), amount_minor=5)

    run = summary(settle(base_env, day, PAYMENTS_SETTLEMENT_PAGE_SIZE="4"))

    assert (run["their_charges"], run["our_payments"], run["looked_up"]) == (23, 23, 0)
    assert (run["agreed"], run["found"]) == (22, {"amount_mismatch": 1})


def test_a_record_made_across_midnight_is_judged_once_on_our_day(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    payment = pay(client, db)
    move_payment(db, ledger, str(payment["id"]), at(day, 86_399))
    edit(
        ledger,
        "charges",
        str(payment["provider_charge_id"]),
        created_at=at(day, 86_401).isoformat(),
        amount_minor=3,
    )

    ours = summary(settle(base_env, day))
    theirs = summary(settle(base_env, day + timedelta(days=1)))

    assert (ours["looked_up"], ours["found"]) == (1, {"amount_mismatch": 1})
    assert (theirs["other_days"], theirs["found"], theirs["compared"]) == (1, {}, 0)
    assert set(by_key(db, str(payment["provider_key"]))) == {"amount_mismatch"}


def test_a_run_refuses_a_day_under_way_and_a_lag_it_was_not_told(
    client: httpx.Client, db: Db, ledger: httpx.Client, base_env: dict[str, str]
) -> None:
    day = own_day()
    db.execute(
        "INSERT INTO settlement_days (day, lease_owner, lease_expires_at)"
        " VALUES (%s, 'settle:elsewhere:1', now() + interval '1 minute')",
        (day,),
    )
    taken = settle(base_env, day, check=False)
    assert taken.returncode == 1
    assert "under way (settle:elsewhere:1)" in taken.stderr

    other = own_day()
    payment = pay(client, db)
    move_payment(db, ledger, str(payment["id"]), at(other))
    edit(ledger, "charges", str(payment["provider_charge_id"]), amount_minor=5)
    wrong = settle(base_env, other, check=False, PAYMENTS_SETTLEMENT_LAG_DAYS="2")
    assert wrong.returncode == 1
    assert "the provider settles at T+1; PAYMENTS_SETTLEMENT_LAG_DAYS is 2" in wrong.stderr
    assert items(db, other) == []
    freed = db.execute(
        "SELECT lease_owner FROM settlement_days WHERE day = %s", (other,)
    ).fetchone()
    assert freed == {"lease_owner": None}
    assert set(by_key(db, str(payment["provider_key"]))) == set()
    assert summary(settle(base_env, other))["found"] == {"amount_mismatch": 1}


def test_bad_dates_are_refused_with_the_form_to_use(base_env: dict[str, str]) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "settle", "--date", "31/01/2025"],
        env={**base_env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "give one as 2025-01-31" in done.stderr
