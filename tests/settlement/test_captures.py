"""Two-step payments settled with real processes: an authorization settles nothing, each
capture settles on its own day like a charge of its amount, and both books' captures are
paired by key (`capture-<id>`) and judged as charges and refunds are.

The fake provider moves charges and refunds onto a day of a test's own (`own_day`), but not
captures: a capture is made on the day it is made. So each test has a provider of its own (a
fresh ledger, settling at T+0) under a name of its own, an API routed to it, and settles the
UTC day its records were made on with `PAYMENTS_PROVIDERS` naming that provider alone: every
other record of the day (other tests', held by other providers) is counted `unconfigured`
and never judged, so a run judges exactly this test's records.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.authorizations.expiry import HoldExpiry
from app.clock import utcnow
from app.events.outbox import followed_by
from app.webhooks.fanout import DELIVERIES
from tests.support.control.settlement import drop, edit, settle, summary
from tests.support.control.spawner import Spawner
from tests.support.control.system import PROVIDER_AUTH
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key
from tests.support.factories.refunds import paid, post_refund, refund_body
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.fixtures.repository import AsyncDb

Db = psycopg.Connection[DictRow]
Row = dict[str, Any]


@dataclass(frozen=True)
class TwoStep:
    """A provider of the test's own and the API routed to it."""

    # The provider's name, as our rows and the items name it.
    name: str
    # The API, as the test's tenant.
    api: httpx.Client
    # The provider's own API (its admin API on: ledger edits).
    ledger: httpx.Client
    # The settings of a settlement run of this provider alone, at T+0.
    env: dict[str, str]


@pytest.fixture
def two_step(
    spawn: Spawner, work_dir: Path, base_env: dict[str, str], tenant: TenantHandle
) -> Iterator[TwoStep]:
    name = f"twostep-{uuid.uuid4().hex[:8]}"
    provider = spawn.provider(
        work_dir / f"{name}.sqlite3", env={"PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS": "0"}
    )
    assert provider.url is not None
    providers = json.dumps([{"name": name, "url": provider.url}])
    api = spawn.api(PAYMENTS_PROVIDERS=providers)
    env = {**base_env, "PAYMENTS_PROVIDERS": providers, "PAYMENTS_SETTLEMENT_LAG_DAYS": "0"}
    with (
        api_client(api, tenant) as client,
        httpx.Client(base_url=provider.url, timeout=10, headers=PROVIDER_AUTH) as ledger,
    ):
        yield TwoStep(name, client, ledger, env)


def fee(amount_minor: int) -> int:
    """The fake provider's documented fee: 2.9% rounded half-up, plus 30."""
    return (amount_minor * 29 + 500) // 1000 + 30


def capture(api: httpx.Client, payment: Row, amount: str | None = None) -> Row:
    """A capture of `payment` through the API (absent `amount`: the rest), as answered."""
    made = post_capture(api, payment["payment_id"], amount)
    assert made.status_code == 201, made.text
    body: Row = made.json()
    return body


def void(api: httpx.Client, payment: Row) -> None:
    made = post_void(api, payment["payment_id"])
    assert made.status_code == 201, made.text


def row(db: Db, payment: Row) -> Row:
    found = db.execute("SELECT * FROM payments WHERE id = %s", (payment["payment_id"],))
    payment_row = found.fetchone()
    assert payment_row is not None
    return payment_row


def captures_of(db: Db, payment: Row) -> list[Row]:
    return db.execute(
        "SELECT * FROM payment_modifications WHERE payment_id = %s AND type = 'capture'"
        " ORDER BY created_at",
        (payment["payment_id"],),
    ).fetchall()


def _added(total: Any, value: Any) -> Any:
    if isinstance(value, dict):
        merged = dict(total or {})
        for name, member in value.items():
            merged[name] = _added(merged.get(name), member)
        return merged
    if isinstance(value, int) and not isinstance(value, bool):
        return (total or 0) + value
    return value


def settle_mine(db: Db, two_step: TwoStep, tenant: TenantHandle) -> Row:
    """Settle every UTC day this test's records were made on (one, unless it ran across
    midnight), and today, for what only the provider made; the runs' summaries summed."""
    days = db.execute(
        "SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date AS day FROM ("
        " SELECT created_at FROM payments WHERE tenant_id = %(t)s"
        " UNION ALL SELECT created_at FROM refunds WHERE tenant_id = %(t)s"
        " UNION ALL SELECT created_at FROM payment_modifications WHERE tenant_id = %(t)s) made",
        {"t": tenant.id},
    ).fetchall()
    runs = [summary(settle(two_step.env, day)) for day in {row["day"] for row in days}]
    runs += [summary(settle(two_step.env, utcnow().date()))] if not runs else []
    total: Row = {}
    for run in runs:
        total = _added(total, run)
    return total


def items_at(db: Db, two_step: TwoStep) -> dict[tuple[str, str, str], Row]:
    """The items at the test's provider, by record type, provider key and kind."""
    rows = db.execute(
        "SELECT * FROM reconciliation_items WHERE provider = %s", (two_step.name,)
    ).fetchall()
    return {(item["record_type"], item["provider_key"], item["kind"]): item for item in rows}


def lines_at(db: Db, two_step: TwoStep) -> list[Row]:
    return db.execute(
        "SELECT * FROM settlement_lines WHERE provider = %s ORDER BY provider_key",
        (two_step.name,),
    ).fetchall()


def their_charge(two_step: TwoStep, key: str) -> Row:
    found = two_step.ledger.get("/charges", params={"idempotency_key": key})
    assert found.status_code == 200, found.text
    charge: Row = found.json()
    return charge


def test_a_day_of_two_step_payments_settles_clean_each_capture_on_a_line_of_its_own(
    two_step: TwoStep, db: Db, async_db: AsyncDb, tenant: TenantHandle
) -> None:
    api = two_step.api
    in_two = authorized(api, amount="10.00")
    capture(api, in_two, "4.00")
    capture(api, in_two)
    part_then_void = authorized(api, amount="10.00")
    capture(api, part_then_void, "2.50")
    void(api, part_then_void)
    held = authorized(api, amount="7.00")
    voided = authorized(api, amount="8.00")
    void(api, voided)
    refunded = authorized(api, amount="10.00")
    capture(api, refunded, "3.00")
    void(api, refunded)
    refund = post_refund(api, refunded["payment_id"], refund_body(amount="1.00"), key=new_key())
    assert refund.status_code == 201, refund.text
    lapsed = authorized(api, amount="5.00")
    db.execute(
        "UPDATE payments SET capture_before = now() - interval '1 second' WHERE id = %s",
        (lapsed["payment_id"],),
    )
    # The worker's expiry pass, as the worker runs it.
    assert async_db.run(HoldExpiry(async_db.db, followed_by(DELIVERIES)).run(100)) >= 1
    one_step = paid(api, amount="12.34")
    manual = {
        "CAPTURED in two": (in_two, 1000),
        "CAPTURED then released": (part_then_void, 250),
        "AUTHORIZED": (held, 0),
        "VOIDED": (voided, 0),
        "PARTIALLY_REFUNDED": (refunded, 300),
        "EXPIRED": (lapsed, 0),
    }
    for status, (payment, captured) in manual.items():
        ours = row(db, payment)
        assert (ours["status"], ours["amount_captured_minor"]) == (status.split()[0], captured)

    run = settle_mine(db, two_step, tenant)

    assert (run["found"], run["opened"], items_at(db, two_step)) == ({}, 0, {})
    assert run["by_provider"][two_step.name] == {
        "their_charges": 7,
        "our_payments": 7,
        "their_refunds": 1,
        "our_refunds": 1,
        "their_captures": 4,
        "our_captures": 4,
    }
    # Every charge agrees (the authorizations without a line of their own), and so do the
    # refund and the four captures; lines: the one-step charge, the refund, each capture.
    assert (run["agreed"], run["lines_recorded"], run["looked_up"]) == (12, 6, 0)
    lines = lines_at(db, two_step)
    by_payment: dict[Any, list[Row]] = {}
    for line in lines:
        by_payment.setdefault(str(line["payment_id"]), []).append(line)
    assert [line["record_type"] for line in by_payment[one_step["payment_id"]]] == ["charge"]
    for payment, captured in manual.values():
        our_captures = captures_of(db, payment)
        settled = by_payment.get(payment["payment_id"], [])
        settled_captures = [line for line in settled if line["record_type"] == "capture"]
        # What settles of an authorization is its captures: each its own line, under its
        # key, on its own day (T+0 here), its fee that of a charge of its amount; and as
        # much as both books captured.
        assert sorted(line["provider_key"] for line in settled_captures) == sorted(
            capture_row["provider_key"] for capture_row in our_captures
        )
        for line in settled_captures:
            their_capture = two_step.ledger.get(
                "/captures", params={"idempotency_key": line["provider_key"]}
            ).json()
            assert line["settled_on"].isoformat() == their_capture["created_at"][:10]
            assert (line["fee_minor"], line["net_minor"]) == (
                fee(line["gross_minor"]),
                line["gross_minor"] - fee(line["gross_minor"]),
            )
        assert sum(line["gross_minor"] for line in settled_captures) == captured
        assert their_charge(two_step, payment_key(db, payment))["amount_captured_minor"] == (
            captured
        )
        assert [line["record_type"] for line in settled if line["refund_id"] is None] == [
            "capture"
        ] * len(our_captures)

    again = settle_mine(db, two_step, tenant)
    assert (again["lines_recorded"], again["opened"], again["auto_resolved"]) == (0, 0, 0)
    assert again["agreed"] == 12


def payment_key(db: Db, payment: Row) -> str:
    return str(row(db, payment)["provider_key"])


def capture_at_the_provider_only(two_step: TwoStep, db: Db, payment: Row, amount: int) -> str:
    """A capture the provider makes of `payment`'s authorization under a key of ours that no
    capture of ours was given: its key."""
    key = f"capture-{uuid.uuid4()}"
    made = two_step.ledger.post(
        f"/charges/{row(db, payment)['provider_charge_id']}/captures",
        json={"amount_minor": amount},
        headers={"Idempotency-Key": key},
    )
    assert made.status_code == 201, made.text
    return key


def capture_in_our_books_only(db: Db, payment: Row, amount: int) -> str:
    """A succeeded capture of `payment` our books record and the provider never made (its
    operation completed), counted in the payment's captured amount: its key."""
    ours = row(db, payment)
    capture_id, operation_id = uuid.uuid4(), uuid.uuid4()
    db.execute(
        "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,"
        " state, completed_at) VALUES (%s, %s, 'capture_payment', %s, 'f', 'COMPLETED', now())",
        (operation_id, ours["tenant_id"], new_key()),
    )
    key = f"capture-{capture_id}"
    db.execute(
        "INSERT INTO payment_modifications (id, tenant_id, payment_id, operation_id, type,"
        " provider_key, charge_id, provider, status, amount_minor, currency,"
        " provider_reference) VALUES (%s, %s, %s, %s, 'capture', %s, %s, %s, 'SUCCEEDED', %s,"
        " %s, %s)",
        (
            capture_id,
            ours["tenant_id"],
            ours["id"],
            operation_id,
            key,
            ours["provider_charge_id"],
            ours["route"][ours["attempt"]],
            amount,
            ours["currency"],
            f"cp_{uuid.uuid4().hex}",
        ),
    )
    db.execute(
        "UPDATE payments SET amount_captured_minor = amount_captured_minor + %s WHERE id = %s",
        (amount, ours["id"]),
    )
    return key


def test_each_difference_of_a_two_step_payment_is_queued_once_with_both_sides(
    two_step: TwoStep, db: Db, tenant: TenantHandle
) -> None:
    api = two_step.api
    ledger = two_step.ledger
    # Captures: one the provider made under a key of ours that we never gave a capture, one
    # our books hold that the provider never made, one of another amount.
    theirs_only = authorized(api, amount="10.00")
    capture(api, theirs_only, "4.00")
    orphan_key = capture_at_the_provider_only(two_step, db, theirs_only, 300)
    ours_only = authorized(api, amount="10.00")
    capture(api, ours_only, "5.00")
    missing_key = capture_in_our_books_only(db, ours_only, 200)
    other_amount = authorized(api, amount="10.00")
    changed = capture(api, other_amount, "4.00")
    [changed_row] = captures_of(db, other_amount)
    db.execute(
        "UPDATE payment_modifications SET amount_minor = 450 WHERE id = %s", (changed_row["id"],)
    )
    # Authorizations: one the provider lost, one it declined, one of another amount.
    dropped, declined, larger = (authorized(api, amount="10.00") for _ in range(3))
    drop(ledger, "charges", str(row(db, dropped)["provider_charge_id"]))
    edit(ledger, "charges", str(row(db, declined)["provider_charge_id"]), status="declined")
    edit(ledger, "charges", str(row(db, larger)["provider_charge_id"]), amount_minor=1001)
    fine = authorized(api, amount="10.00")
    capture(api, fine)

    run = settle_mine(db, two_step, tenant)

    assert run["found"] == {"amount_mismatch": 2, "missing": 2, "orphan": 1, "status_mismatch": 3}
    # Looked up by key: the capture and the authorization the listings lack.
    assert (run["opened"], run["looked_up"]) == (8, 2)
    counts = run["by_provider"][two_step.name]
    assert (counts["their_captures"], counts["our_captures"]) == (5, 5)  # each one the other lacks
    queued = items_at(db, two_step)
    assert {key: item["detail"] for key, item in queued.items()} == {
        ("capture", orphan_key, "orphan"): "the provider made this capture; we have no record",
        # Both books differ in both places: the authorization's captured amount too.
        ("charge", payment_key(db, theirs_only), "status_mismatch"): (
            "we recorded 400 captured, the provider 700"
        ),
        ("capture", missing_key, "missing"): "we recorded this capture; the provider has none",
        ("charge", payment_key(db, ours_only), "status_mismatch"): (
            "we recorded 700 captured, the provider 500"
        ),
        ("capture", changed_row["provider_key"], "amount_mismatch"): (
            "we recorded 450 EUR, the provider 400 EUR"
        ),
        ("charge", payment_key(db, dropped), "missing"): (
            "we recorded this authorization; the provider has none"
        ),
        ("charge", payment_key(db, declined), "status_mismatch"): (
            "we recorded this charge as authorized (AUTHORIZED), the provider as declined"
        ),
        ("charge", payment_key(db, larger), "amount_mismatch"): (
            "we recorded 1000 EUR, the provider 1001 EUR"
        ),
    }
    orphan = queued["capture", orphan_key, "orphan"]
    assert (orphan["ours"], orphan["payment_id"]) == (None, None)
    assert orphan["theirs"]["charge_id"] == row(db, theirs_only)["provider_charge_id"]
    assert orphan["theirs"]["amount_minor"] == 300
    missing = queued["capture", missing_key, "missing"]
    assert (missing["theirs"], str(missing["payment_id"])) == (None, ours_only["payment_id"])
    assert missing["ours"]["id"] == missing_key.removeprefix("capture-")
    assert missing["ours"]["payment_id"] == ours_only["payment_id"]
    wrong = queued["capture", changed_row["provider_key"], "amount_mismatch"]
    assert (wrong["ours"]["id"], wrong["theirs"]["id"]) == (
        changed["capture_id"],
        changed["provider_capture_id"],
    )
    larger_item = queued["charge", payment_key(db, larger), "amount_mismatch"]
    shown = (larger_item["ours"], larger_item["theirs"])
    assert [(side["capture"], side["amount_captured_minor"]) for side in shown] == [
        ("manual", 0),
        ("manual", 0),
    ]
    assert larger_item["theirs"]["voided"] is False
    # What the provider settled is recorded whatever our books say: its line is the proof.
    settled = {line["provider_key"]: line for line in lines_at(db, two_step)}
    assert settled[orphan_key]["payment_id"] is None
    assert settled[changed_row["provider_key"]]["gross_minor"] == 400
    assert missing_key not in settled

    # Our books put right: the amount differs no longer, and its item resolves itself.
    db.execute(
        "UPDATE payment_modifications SET amount_minor = 400 WHERE id = %s", (changed_row["id"],)
    )
    again = settle_mine(db, two_step, tenant)
    assert (again["opened"], again["auto_resolved"]) == (0, 1)
    key = ("capture", changed_row["provider_key"], "amount_mismatch")
    assert items_at(db, two_step)[key]["state"] == "auto_resolved"
