"""Daily settlement reports: the lag, the fees, the payouts, JSON and CSV agreeing."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_provider.provider import (
    Provider,
    add_ledger_charge,
    charge_body,
    edit_charge,
    new_account,
    new_key,
    post_charge,
    settlement,
    start_provider,
)

# Amount -> fee: 2.9% rounded half-up in minor units, plus 30.
FEES = {1: 30, 17: 30, 50: 31, 500: 45, 1000: 59, 1234: 66, 1500: 74, 999_999: 29_030}


def lagged(tmp_path: Path, days: int) -> Provider:
    return start_provider(
        tmp_path / f"lag{days}.sqlite3",
        tmp_path / "logs",
        env={"PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS": str(days)},
    )


@pytest.fixture
def lag_two(tmp_path: Path) -> Iterator[httpx.Client]:
    provider = lagged(tmp_path, 2)
    try:
        with provider.client() as client:
            yield client
    finally:
        provider.process.stop()


def refund(client: httpx.Client, charge_id: str, amount: int) -> dict[str, Any]:
    response = client.post(
        "/refunds",
        json={"charge_id": charge_id, "amount_minor": amount},
        headers={"Idempotency-Key": new_key()},
    )
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def test_fees_nets_and_payouts_of_a_day(client: httpx.Client) -> None:
    # Made on 2024-03-01; the session's provider settles T+1, on 2024-03-02.
    made_on = "2024-03-01T{}Z"
    keys = {}
    for hour, amount in enumerate(FEES):
        key = new_key()
        keys[key] = amount
        add_ledger_charge(
            client,
            idempotency_key=key,
            amount_minor=amount,
            currency="EUR",
            created_at=made_on.format(f"{hour:02}:00:00"),
        )
    declined = add_ledger_charge(
        client,
        idempotency_key=new_key(),
        amount_minor=700,
        currency="EUR",
        status="declined",
        created_at=made_on.format("20:00:00"),
    )
    charge = post_charge(client, new_key(), charge_body(account_id=new_account(), amount_minor=800))
    charge_id = charge.json()["charge_id"]
    edit_charge(client, charge_id, currency="USD", created_at=made_on.format("21:00:00"))
    given_back = refund(client, charge_id, 300)
    moved = client.patch(
        f"/_ledger/refunds/{given_back['refund_id']}", json={"created_at": "2024-03-01T22:00:00Z"}
    )
    assert moved.status_code == 200, moved.text

    report = settlement(client, "2024-03-02")

    assert (report["date"], report["settlement_lag_days"], report["complete"]) == (
        "2024-03-02",
        1,
        True,
    )
    lines = report["data"]
    assert declined["charge_id"] not in {line["id"] for line in lines}
    eur = [line for line in lines if line["currency"] == "EUR"]
    assert [(line["gross_minor"], line["fee_minor"], line["net_minor"]) for line in eur] == [
        (amount, fee, amount - fee) for amount, fee in FEES.items()
    ]
    assert {line["idempotency_key"]: line["gross_minor"] for line in eur} == keys
    usd = [line for line in lines if line["currency"] == "USD"]
    assert [(line["type"], line["id"], line["charge_id"]) for line in usd] == [
        ("charge", charge_id, None),
        ("refund", given_back["refund_id"], charge_id),
    ]
    assert [(line["gross_minor"], line["fee_minor"], line["net_minor"]) for line in usd] == [
        (800, 53, 747),
        (-300, 0, -300),
    ]
    assert {(line["payout_id"], line["settled_on"], line["status"]) for line in lines} == {
        ("po_20240302_EUR", "2024-03-02", "succeeded"),
        ("po_20240302_USD", "2024-03-02", "succeeded"),
    }
    gross = sum(FEES)
    fees = sum(FEES.values())
    assert report["payouts"] == [
        {
            "payout_id": "po_20240302_EUR",
            "currency": "EUR",
            "count": len(FEES),
            "gross_minor": gross,
            "fee_minor": fees,
            "net_minor": gross - fees,
        },
        {
            "payout_id": "po_20240302_USD",
            "currency": "USD",
            "count": 2,
            "gross_minor": 500,
            "fee_minor": 53,
            "net_minor": 447,
        },
    ]
    # The day before and the day after settle nothing of these.
    assert settlement(client, "2024-03-01")["data"] == []
    assert settlement(client, "2024-03-03")["data"] == []


def test_csv_and_json_agree(client: httpx.Client) -> None:
    charge_id = post_charge(client, new_key(), charge_body(account_id=new_account())).json()[
        "charge_id"
    ]
    edit_charge(client, charge_id, created_at="2024-04-01T09:00:00+02:00")
    made = refund(client, charge_id, 250)
    client.patch(f"/_ledger/refunds/{made['refund_id']}", json={"created_at": "2024-04-01"})
    add_ledger_charge(
        client, idempotency_key=new_key(), amount_minor=99, currency="GBP", created_at="2024-04-01"
    )

    report = settlement(client, "2024-04-02")
    response = client.get("/settlements/2024-04-02.csv")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert list(rows[0]) == list(report["data"][0])
    numbers = ("gross_minor", "fee_minor", "net_minor")
    as_json = [
        {
            **row,
            **{name: int(row[name]) for name in numbers},
            "charge_id": row["charge_id"] or None,
        }
        for row in rows
    ]
    assert as_json == report["data"]
    assert len(rows) == 3


def test_a_record_settles_lag_days_after_its_day(lag_two: httpx.Client) -> None:
    last = add_ledger_charge(
        lag_two,
        idempotency_key="last-instant",
        amount_minor=1000,
        currency="EUR",
        created_at="2024-05-10T23:59:59.999999Z",
    )
    first = add_ledger_charge(
        lag_two,
        idempotency_key="first-instant",
        amount_minor=1000,
        currency="EUR",
        created_at="2024-05-11T00:00:00Z",
    )

    def settled(day: str) -> list[str]:
        return [line["id"] for line in settlement(lag_two, day)["data"]]

    assert settled("2024-05-11") == []
    assert settled("2024-05-12") == [last["charge_id"]]
    assert settled("2024-05-13") == [first["charge_id"]]
    assert settlement(lag_two, "2024-05-13")["settlement_lag_days"] == 2


def test_what_has_not_settled_yet_is_not_reported(client: httpx.Client) -> None:
    made = post_charge(client, new_key(), charge_body(account_id=new_account())).json()
    made_on = date.fromisoformat(made["created_at"][:10])

    # T+1: made today, it settles tomorrow; tomorrow's report has nothing yet.
    tomorrow = settlement(client, (made_on + timedelta(days=1)).isoformat())
    assert (tomorrow["data"], tomorrow["complete"]) == ([], False)
    assert made["charge_id"] not in {
        line["id"] for line in settlement(client, str(made_on))["data"]
    }


def test_with_no_lag_a_charge_settles_the_day_it_is_made(tmp_path: Path) -> None:
    provider = lagged(tmp_path, 0)
    try:
        with provider.client() as client:
            made = post_charge(client, new_key(), charge_body(account_id=new_account())).json()
            report = settlement(client, made["created_at"][:10])
    finally:
        provider.process.stop()

    assert [line["id"] for line in report["data"]] == [made["charge_id"]]
    assert report["settlement_lag_days"] == 0


@pytest.mark.parametrize("day", ["2024-5-1", "2024-02-30", "yesterday", "20240501"])
def test_a_bad_date_is_refused(client: httpx.Client, day: str) -> None:
    for path in (f"/settlements/{day}", f"/settlements/{day}.csv"):
        response = client.get(path)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_request"
        assert day in response.json()["detail"]
