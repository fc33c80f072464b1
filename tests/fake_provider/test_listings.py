"""Listing charges and refunds by creation window, a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_provider.provider import (
    Provider,
    add_ledger_charge,
    charge_body,
    edit_charge,
    listed,
    new_account,
    new_key,
    post_charge,
    start_provider,
)

CHARGES = 2_500
# Charges added at one instant, so the id alone orders them, across a page's edge too.
TIED = 30
TIED_AT = "2025-03-01T00:00:00.000000Z"


def order(record: dict[str, Any], id_name: str = "charge_id") -> tuple[str, str]:
    return (record["created_at"], record[id_name])


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """A provider of its own with 2,500 charges made now, a few declined or refunded, and
    30 added at one past instant."""
    base = tmp_path_factory.mktemp("crowded")
    provider = start_provider(base / "ledger.sqlite3", base / "logs")
    try:
        with provider.client() as client:
            for index in range(CHARGES):
                account = "acc_decline_expired_card" if index % 100 == 7 else "acc_listings"
                body = charge_body(account_id=account, amount_minor=1000 + index)
                response = post_charge(client, f"listing-{index:05}", body)
                assert response.status_code == 201, response.text
                if index % 100 in (3, 4):
                    amount = 1000 + index if index % 100 == 3 else 10
                    refund = client.post(
                        "/refunds",
                        json={"charge_id": response.json()["charge_id"], "amount_minor": amount},
                        headers={"Idempotency-Key": f"listing-refund-{index:05}"},
                    )
                    assert refund.status_code == 201, refund.text
            for index in range(TIED):
                add_ledger_charge(
                    client,
                    idempotency_key=f"tied-{index:02}",
                    amount_minor=500,
                    currency="USD",
                    created_at=TIED_AT,
                )
        yield provider
    finally:
        provider.process.stop()


@pytest.fixture
def crowded_client(crowded: Provider) -> Iterator[httpx.Client]:
    with crowded.client() as client:
        yield client


def test_pages_hold_every_charge_once_in_creation_order(crowded_client: httpx.Client) -> None:
    pages = listed(crowded_client, "/charges", limit=100)
    charges = [charge for page in pages for charge in page]

    assert [len(page) for page in pages] == [100] * 25 + [30]
    assert len({charge["charge_id"] for charge in charges}) == CHARGES + TIED
    assert charges == sorted(charges, key=order)
    assert [c["idempotency_key"] for c in charges[:TIED]] == [
        c["idempotency_key"] for c in sorted(charges[:TIED], key=lambda c: c["charge_id"])
    ]
    assert all(c["created_at"] == TIED_AT for c in charges[:TIED])
    made_now = [c["idempotency_key"] for c in charges[TIED:]]
    assert made_now == [f"listing-{index:05}" for index in range(CHARGES)]


def test_a_charge_shows_its_status_and_what_was_refunded(crowded_client: httpx.Client) -> None:
    charges = {c["idempotency_key"]: c for page in listed(crowded_client, "/charges") for c in page}
    assert set(charges["listing-00007"]) == {
        "charge_id",
        "idempotency_key",
        "amount_minor",
        "amount_refunded_minor",
        "currency",
        "status",
        "decline_code",
        "account_id",
        "reference",
        "created_at",
        "capture",
        "amount_captured_minor",
        "voided",
    }
    seen = {
        key: (c["status"], c["amount_refunded_minor"])
        for key, c in charges.items()
        if key in ("listing-00102", "listing-00103", "listing-00104", "listing-00107")
    }
    assert seen == {
        "listing-00102": ("succeeded", 0),
        "listing-00103": ("refunded", 1103),
        "listing-00104": ("partially_refunded", 10),
        "listing-00107": ("declined", 0),
    }
    assert charges["listing-00107"]["decline_code"] == "expired_card"


def test_a_window_is_honoured_across_pages(crowded_client: httpx.Client) -> None:
    everything = [c for page in listed(crowded_client, "/charges", limit=1000) for c in page]
    gte, lt = everything[700]["created_at"], everything[1800]["created_at"]
    expected = [c for c in everything if gte <= c["created_at"] < lt]

    pages = listed(crowded_client, "/charges", created_gte=gte, created_lt=lt, limit=137)

    assert [c for page in pages for c in page] == expected
    assert len(pages) == -(-len(expected) // 137)
    # The tied instant is its own window: exactly the 30, whatever the page size.
    tied = listed(
        crowded_client,
        "/charges",
        created_gte=TIED_AT,
        created_lt="2025-03-01T00:00:00.000001Z",
        limit=7,
    )
    assert sum(len(page) for page in tied) == TIED
    before = listed(crowded_client, "/charges", created_lt=TIED_AT)
    assert before == [[]]


def test_the_default_page_is_100_and_the_largest_1000(crowded_client: httpx.Client) -> None:
    default = crowded_client.get("/charges", params={"created_gte": "2025-01-01"}).json()
    largest = crowded_client.get("/charges", params={"limit": 1000}).json()

    assert (len(default["data"]), default["has_more"]) == (100, True)
    assert (len(largest["data"]), largest["has_more"]) == (1000, True)


def test_refunds_are_listed_with_their_charge_and_currency(crowded_client: httpx.Client) -> None:
    pages = listed(crowded_client, "/refunds", limit=9)
    refunds = [r for page in pages for r in page]

    assert len(refunds) == 2 * CHARGES // 100
    assert refunds == sorted(refunds, key=lambda r: order(r, "refund_id"))
    assert [r["idempotency_key"] for r in refunds[:2]] == [
        "listing-refund-00003",
        "listing-refund-00004",
    ]
    assert set(refunds[0]) == {
        "refund_id",
        "charge_id",
        "idempotency_key",
        "amount_minor",
        "currency",
        "status",
        "created_at",
    }
    assert {(r["currency"], r["status"]) for r in refunds} == {("EUR", "succeeded")}


def test_a_moved_charge_moves_in_the_listing(client: httpx.Client) -> None:
    made = post_charge(client, new_key(), charge_body(account_id=new_account())).json()
    moved_to = "2019-06-01T08:00:00Z"
    edit_charge(client, made["charge_id"], created_at=moved_to)

    window = {"created_gte": "2019-06-01", "created_lt": "2019-06-02"}
    assert [[c["charge_id"] for c in page] for page in listed(client, "/charges", **window)] == [
        [made["charge_id"]]
    ]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"created_gte": "yesterday"}, "created_gte"),
        ({"created_lt": "2025-01-31T10:00:00"}, "time zone"),
        ({"created_gte": "2025-02-01", "created_lt": "2025-01-01"}, "inverted"),
        ({"created_gt": "2025-01-01"}, "created_gt"),
        ({"starting_after": "ch_nobody"}, "ch_nobody"),
        ({"starting_after": ""}, "starting_after"),
        ({"limit": "5", "idempotency_key": "k"}, "idempotency_key"),
    ],
)
def test_a_bad_listing_query_is_refused_clearly(
    client: httpx.Client, query: dict[str, str], names: str
) -> None:
    for path in ("/charges", "/refunds"):
        response = client.get(path, params=query)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_request"
        assert names in response.json()["detail"]


def test_a_repeated_parameter_is_refused(client: httpx.Client) -> None:
    response = client.get("/charges?limit=1&limit=2")

    assert response.status_code == 400
    assert "limit" in response.json()["detail"]


def test_a_cursor_must_name_a_record_of_its_kind(client: httpx.Client) -> None:
    made = post_charge(client, new_key(), charge_body(account_id=new_account())).json()

    wrong_kind = client.get("/refunds", params={"starting_after": made["charge_id"]})

    assert wrong_kind.status_code == 400
    assert made["charge_id"] in wrong_kind.json()["detail"]


def test_the_listing_is_served_from_memory_after_a_restart(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    first = start_provider(db_path, tmp_path / "logs")
    try:
        with first.client() as client:
            for index in range(5):
                post_charge(client, f"restart-{index}", charge_body(amount_minor=100 + index))
            before = listed(client, "/charges", limit=2)
    finally:
        first.process.stop()
    second = start_provider(db_path, tmp_path / "logs")
    try:
        with second.client() as client:
            assert listed(client, "/charges", limit=2) == before
    finally:
        second.process.stop()
