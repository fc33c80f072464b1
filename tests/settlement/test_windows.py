"""What settlement reconciliation catches that nothing else would, and what it leaves to
recovery: the charge that lands after an operator resolved its payment "not charged", an
unknown operation the provider has a charge for, and the worker's daily run.
"""

from __future__ import annotations

from datetime import date, timedelta

import httpx
import psycopg
from psycopg.rows import DictRow

from app.clock import utcnow
from tests.conftest import TEST_LEASE_S
from tests.support.control.faults import FaultInjector
from tests.support.control.settlement import (
    add_charge,
    at,
    by_key,
    edit,
    move_payment,
    own_day,
    settle,
    summary,
)
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.discrepancies import make_item
from tests.support.factories.operators import flag
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import operation, payment_for, wait_past_last_send

Db = psycopg.Connection[DictRow]


def test_a_charge_landing_after_a_not_charged_resolution_is_queued_as_an_orphan(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: Db,
    ledger: httpx.Client,
    base_env: dict[str, str],
) -> None:
    # The window docs/protocol.md admits: a send still travelling when an operator, a lease
    # after it, resolves the payment as not charged; the provider then makes the charge.
    flagged = flag(client, faults, db, charged=False)
    faults.clear()
    wait_past_last_send(db, flagged.operation_id, float(TEST_LEASE_S))
    resolved = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "not_charged", "reason": "provider has no record"},
    )
    assert resolved.status_code == 200, resolved.text
    payment = payment_for(db, flagged.operation_id)
    assert payment["status"] == "FAILED"
    day = own_day()
    db.execute("UPDATE payments SET created_at = %s WHERE id = %s", (at(day), payment["id"]))
    add_charge(
        ledger,
        str(payment["provider_key"]),
        at(day, 43_300),
        amount_minor=1000,
        account_id=flagged.body["account_id"],
    )

    run = summary(settle(base_env, day))

    assert run["found"] == {"orphan": 1}
    orphan = by_key(db, str(payment["provider_key"]))["orphan"]
    assert orphan["state"] == "open"
    assert orphan["detail"] == "the provider made this charge; we recorded it as not made"
    assert (orphan["ours"]["status"], orphan["ours"]["operation_state"]) == ("FAILED", "FAILED")
    assert orphan["theirs"]["status"] == "succeeded"
    assert str(orphan["operation_id"]) == flagged.operation_id


def test_an_unknown_operation_the_provider_charged_is_handed_to_the_reconciler(
    client: httpx.Client,
    faults: FaultInjector,
    db: Db,
    ledger: httpx.Client,
    base_env: dict[str, str],
) -> None:
    body = payment_body()
    faults.add("drop_after_commit", account_id=body["account_id"])
    faults.add("lookup_unavailable", account_id=body["account_id"], times=1000)
    answered = post_payment(client, body, key=new_key())
    assert answered.status_code == 202, answered.text
    operation_id = answered.json()["operation_id"]
    faults.clear()
    db.execute(
        "UPDATE operations SET next_check_at = now() + interval '1 hour' WHERE id = %s",
        (operation_id,),
    )
    assert operation(db, operation_id)["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    payment = payment_for(db, operation_id)
    (charge,) = faults.charges(account_id=body["account_id"])
    day = own_day()
    db.execute("UPDATE payments SET created_at = %s WHERE id = %s", (at(day), payment["id"]))
    edit(ledger, "charges", charge["charge_id"], created_at=at(day).isoformat())

    run = summary(settle(base_env, day))

    assert (run["recovering"], run["found"], run["opened"]) == (1, {}, 0)
    assert by_key(db, str(payment["provider_key"])) == {}
    due = db.execute(
        "SELECT next_check_at <= now() AS due FROM operations WHERE id = %s", (operation_id,)
    ).fetchone()
    assert due == {"due": True}


def test_the_worker_settles_yesterday_on_its_own(
    client: httpx.Client, db: Db, ledger: httpx.Client, spawn: Spawner
) -> None:
    yesterday = utcnow().date() - timedelta(days=1)
    # Yesterday is the whole session's: a run of it by an earlier test's worker would leave
    # this one's payment unsettled (a finished day is not due again).
    db.execute("DELETE FROM settlement_days WHERE day = %s", (yesterday,))
    created = post_payment(client, payment_body(), key=new_key())
    assert created.status_code == 201, created.text
    payment = payment_for(db, created.json()["operation_id"])
    move_payment(db, ledger, str(payment["id"]), at(yesterday))
    edit(ledger, "charges", str(payment["provider_charge_id"]), amount_minor=1)

    worker = spawn.worker(once=False, PAYMENTS_SETTLE_INTERVAL_S="1")

    def settled() -> bool:
        row = db.execute(
            "SELECT last_finished_at FROM settlement_days WHERE day = %s", (yesterday,)
        ).fetchone()
        return bool(row and row["last_finished_at"])

    wait_until(settled, timeout=60, message="the worker to settle yesterday")
    assert set(by_key(db, str(payment["provider_key"]))) == {"amount_mismatch"}
    item = by_key(db, str(payment["provider_key"]))["amount_mismatch"]
    assert item["day"] == yesterday
    history = db.execute(
        "SELECT actor FROM reconciliation_item_changes WHERE item_id = %s", (item["id"],)
    ).fetchall()
    assert history[0]["actor"].startswith("worker:")
    assert worker.alive()


def test_a_worker_stopped_during_a_run_gives_its_day_back_and_starts_no_other(
    db: Db, spawn: Spawner
) -> None:
    # Two days due (an expected line still open on each), before any other test's (own_day
    # starts in 1990), so the worker takes the first; its run is held right after taking the
    # lease (the failpoint), and the worker is told to stop.
    first, second = date(1989, 6, 1), date(1989, 6, 2)
    db.execute("DELETE FROM settlement_days WHERE day IN (%s, %s)", (first, second))
    for day in (first, second):
        make_item(db, kind="expected", day=day)
    worker = spawn.worker(
        once=False, PAYMENTS_SETTLE_INTERVAL_S="1", PAYMENTS_FAILPOINTS="settle_claimed=120"
    )
    owner = f"worker:%:{worker.pid}"

    def held() -> list[date]:
        rows = db.execute(
            "SELECT day FROM settlement_days WHERE lease_owner LIKE %s", (owner,)
        ).fetchall()
        return [row["day"] for row in rows]

    wait_until(lambda: held() == [first], timeout=60, message="the worker to take its day")
    assert worker.stop(timeout=30) == 0, worker.log()

    # Given back at once, not held until its lease (15 minutes) runs out; nothing concluded;
    # the other day never started.
    rows = db.execute(
        "SELECT day, lease_owner, last_finished_at FROM settlement_days WHERE day IN (%s, %s)",
        (first, second),
    ).fetchall()
    assert rows == [{"day": first, "lease_owner": None, "last_finished_at": None}]
    log = worker.log()
    assert "settlement run interrupted by the stop" in log
    assert "Traceback" not in log
