"""Captures and voids in the provider's books: the listings, the settlement reports, the
merchant's key, and a ledger file from before two-step charges, upgraded in place."""

from __future__ import annotations

import csv
import io
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider.ledger import Ledger
from fake_provider.ledger_schema import LedgerVersionError
from fake_provider.settlements import charge_fee
from tests.fake_provider.provider import (
    Provider,
    authorize,
    charge_body,
    charge_by_key,
    listed,
    new_account,
    new_key,
    post_capture,
    post_charge,
    post_void,
    settlement,
    start_provider,
)

AUTHORIZATIONS = 4


@dataclass(frozen=True)
class Books:
    """A provider of its own (settling the day a record is made), and what was made at it."""

    provider: Provider
    automatic: dict[str, Any]
    authorizations: list[dict[str, Any]]
    captures: list[dict[str, Any]]
    voids: list[dict[str, Any]]
    refund: dict[str, Any]


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Books]:
    """An automatic charge; four authorizations of 1000, each captured twice (100 + n, then
    200), three of them voided; a refund of the first one's first capture."""
    base = tmp_path_factory.mktemp("two-step-books")
    provider = start_provider(
        base / "ledger.sqlite3",
        base / "logs",
        env={"PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS": "0"},
    )
    try:
        with provider.client() as client:
            automatic = post_charge(client, new_key(), charge_body(amount_minor=1500)).json()
            authorizations = [authorize(client) for _ in range(AUTHORIZATIONS)]
            captures, voids = [], []
            for index, charge in enumerate(authorizations):
                for amount in (100 + index, 200):
                    made = post_capture(client, new_key(), charge["charge_id"], amount)
                    assert made.status_code == 201, made.text
                    captures.append(made.json())
            for charge in authorizations[1:]:
                voided = post_void(client, new_key(), charge["charge_id"])
                assert voided.status_code == 201, voided.text
                voids.append(voided.json())
            refunded = client.post(
                "/refunds",
                json={"charge_id": authorizations[0]["charge_id"], "amount_minor": 100},
                headers={"Idempotency-Key": new_key()},
            )
            assert refunded.status_code == 201, refunded.text
        yield Books(provider, automatic, authorizations, captures, voids, refunded.json())
    finally:
        provider.process.stop()


@pytest.fixture
def books_client(books: Books) -> Iterator[httpx.Client]:
    with books.provider.client() as client:
        yield client


def test_captures_and_voids_are_listed_page_by_page_in_creation_order(
    books: Books, books_client: httpx.Client
) -> None:
    capture_pages = listed(books_client, "/captures", limit=3)
    void_pages = listed(books_client, "/voids", limit=2)

    assert [len(page) for page in capture_pages] == [3, 3, 2]
    assert [c for page in capture_pages for c in page] == books.captures
    assert [len(page) for page in void_pages] == [2, 1]
    assert [v for page in void_pages for v in page] == books.voids
    # The whole ledger (admin API) holds the same records.
    assert books_client.get("/captures").json() == {"captures": books.captures}
    assert books_client.get("/voids").json() == {"voids": books.voids}


def test_a_capture_window_is_honoured_across_pages(
    books: Books, books_client: httpx.Client
) -> None:
    window = {
        "created_gte": books.captures[2]["created_at"],
        "created_lt": books.captures[6]["created_at"],
    }

    pages = listed(books_client, "/captures", limit=1, **window)

    assert [c for page in pages for c in page] == books.captures[2:6]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/voids", {"starting_after": "capture"}),
        ("/captures", {"starting_after": "void"}),
        ("/captures", {"created_gt": "2025-01-01"}),
        ("/voids", {"limit": "0"}),
        ("/captures", {"idempotency_key": "k", "limit": "10"}),
    ],
    ids=["void-after-a-capture", "capture-after-a-void", "misspelt", "limit-0", "key-and-page"],
)
def test_a_bad_capture_or_void_listing_is_refused(
    books: Books, books_client: httpx.Client, path: str, params: dict[str, str]
) -> None:
    named = {"capture": books.captures[0]["capture_id"], "void": books.voids[0]["void_id"]}
    query = {name: named.get(value, value) for name, value in params.items()}

    response = books_client.get(path, params=query)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_an_authorization_is_listed_with_what_was_captured_refunded_and_voided(
    books: Books, books_client: httpx.Client
) -> None:
    charges = {c["charge_id"]: c for page in listed(books_client, "/charges") for c in page}

    first, second = (charges[c["charge_id"]] for c in books.authorizations[:2])
    automatic = charges[books.automatic["charge_id"]]

    assert (first["status"], first["capture"]) == ("authorized", "manual")
    assert (first["amount_captured_minor"], first["amount_refunded_minor"]) == (300, 100)
    assert first["voided"] is False
    assert (second["amount_captured_minor"], second["voided"]) == (301, True)
    assert (automatic["capture"], automatic["amount_captured_minor"]) == ("automatic", 1500)


def test_captures_settle_like_charges_and_authorizations_and_voids_do_not(
    books: Books, books_client: httpx.Client
) -> None:
    days = {record["created_at"][:10] for record in [books.automatic, *books.captures]}
    lines = [line for day in sorted(days) for line in settlement(books_client, day)["data"]]
    csv_types = [
        row["type"]
        for day in sorted(days)
        for row in csv.DictReader(io.StringIO(books_client.get(f"/settlements/{day}.csv").text))
    ]

    by_id = {line["id"]: line for line in lines}
    assert set(by_id) == {
        books.automatic["charge_id"],
        books.refund["refund_id"],
        *(c["capture_id"] for c in books.captures),
    }
    for capture in books.captures:
        line = by_id[capture["capture_id"]]
        fee = charge_fee(capture["amount_minor"])
        assert line["type"] == "capture"
        assert (line["charge_id"], line["idempotency_key"]) == (
            capture["charge_id"],
            capture["idempotency_key"],
        )
        assert (line["gross_minor"], line["fee_minor"], line["net_minor"]) == (
            capture["amount_minor"],
            fee,
            capture["amount_minor"] - fee,
        )
        assert (line["currency"], line["created_at"]) == ("EUR", capture["created_at"])
    assert by_id[books.automatic["charge_id"]]["type"] == "charge"
    assert sorted(csv_types) == sorted(line["type"] for line in lines)


def test_every_two_step_call_needs_the_merchants_key(
    provider: Provider, client: httpx.Client
) -> None:
    charge = authorize(client)
    key = new_key()
    with provider.client(headers={}) as anonymous:
        capture = post_capture(anonymous, key, charge["charge_id"], 100)
        void = post_void(anonymous, key, charge["charge_id"])
        paths = ("/captures", "/voids")
        lookups = [anonymous.get(path, params={"idempotency_key": key}) for path in paths]
        pages = [anonymous.get(path, params={"limit": "1"}) for path in paths]
        # The whole ledgers are the admin API's, which takes no merchant key.
        whole = [anonymous.get(path) for path in paths]

    assert [r.status_code for r in (capture, void, *lookups, *pages)] == [401] * 6
    assert [r.status_code for r in whole] == [200, 200]
    state = charge_by_key(client, charge["idempotency_key"])
    assert (state["amount_captured_minor"], state["voided"]) == (0, False)


@pytest.mark.parametrize("kept_by", ["capture", "void"])
def test_a_charge_with_a_capture_or_void_is_not_dropped_from_the_ledger(
    client: httpx.Client, kept_by: str
) -> None:
    kept, untouched = authorize(client), authorize(client)
    if kept_by == "capture":
        made = post_capture(client, new_key(), kept["charge_id"], 100)
    else:
        made = post_void(client, new_key(), kept["charge_id"])
    assert made.status_code == 201, made.text

    refused = client.delete(f"/_ledger/charges/{kept['charge_id']}")
    dropped = client.delete(f"/_ledger/charges/{untouched['charge_id']}")

    assert refused.status_code == 409
    assert refused.json()["error"] == "conflict"
    assert charge_by_key(client, kept["idempotency_key"])["charge_id"] == kept["charge_id"]
    assert dropped.status_code == 204


# The ledger's tables as a provider without two-step charges wrote them.
OLD_SCHEMA = [
    """
    CREATE TABLE charges (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        charge_id       TEXT NOT NULL UNIQUE,
        idempotency_key TEXT NOT NULL UNIQUE,
        amount_minor    INTEGER NOT NULL CHECK (amount_minor > 0),
        currency        TEXT NOT NULL,
        account_id      TEXT NOT NULL,
        reference       TEXT NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('succeeded', 'declined')),
        decline_code    TEXT,
        created_at      TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE refunds (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        refund_id       TEXT NOT NULL UNIQUE,
        charge_id       TEXT NOT NULL REFERENCES charges (charge_id),
        idempotency_key TEXT NOT NULL UNIQUE,
        amount_minor    INTEGER NOT NULL CHECK (amount_minor > 0),
        status          TEXT NOT NULL CHECK (status = 'succeeded'),
        created_at      TEXT NOT NULL
    )
    """,
]
OLD_CHARGES = [
    ("ch_old_1", "old-1", 1250, "EUR", "acc_1", "order-1", "succeeded", None),
    ("ch_old_2", "old-2", 700, "EUR", "acc_decline_lost_card", "", "declined", "lost_card"),
]


def old_ledger(path: Path) -> None:
    """A ledger file as the provider wrote it before two-step charges: two charges, a refund."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in OLD_SCHEMA:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO charges (charge_id, idempotency_key, amount_minor, currency, account_id,"
            " reference, status, decline_code, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, '2025-01-31T10:00:00.000000Z')",
            OLD_CHARGES,
        )
        conn.execute(
            "INSERT INTO refunds (refund_id, charge_id, idempotency_key, amount_minor, status,"
            " created_at) VALUES ('re_old_1', 'ch_old_1', 'old-refund-1', 250, 'succeeded',"
            " '2025-01-31T11:00:00.000000Z')"
        )
    conn.close()


def test_a_ledger_from_before_two_step_charges_opens_and_serves(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    old_ledger(db_path)
    body = {"amount_minor": 1250, "currency": "EUR", "account_id": "acc_1", "reference": "order-1"}

    upgraded = start_provider(db_path, tmp_path / "logs")
    try:
        with upgraded.client() as client:
            old = charge_by_key(client, "old-1")
            declined = charge_by_key(client, "old-2")
            replay = post_charge(client, "old-1", body)
            old_refund = client.get("/refunds", params={"idempotency_key": "old-refund-1"})
            refunded = client.post(
                "/refunds",
                json={"charge_id": "ch_old_1", "amount_minor": 1000},
                headers={"Idempotency-Key": new_key()},
            )
            charge = authorize(client, amount_minor=900)
            capture = post_capture(client, new_key(), charge["charge_id"], 500)
            new_charge = post_charge(client, new_key(), charge_body(account_id=new_account()))
    finally:
        upgraded.process.stop()

    assert old == {
        "charge_id": "ch_old_1",
        "status": "succeeded",
        "decline_code": None,
        "idempotency_key": "old-1",
        "amount_minor": 1250,
        "currency": "EUR",
        "account_id": "acc_1",
        "reference": "order-1",
        "created_at": "2025-01-31T10:00:00.000000Z",
        "capture": "automatic",
        "amount_captured_minor": 1250,
        "voided": False,
    }
    assert (declined["status"], declined["amount_captured_minor"]) == ("declined", 0)
    assert (replay.status_code, replay.json()) == (201, old)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert old_refund.json()["refund_id"] == "re_old_1"
    # What is left of the old charge after its old refund: 1000 more, and no more.
    assert refunded.status_code == 201, refunded.text
    assert capture.status_code == 201, capture.text
    assert new_charge.status_code == 201, new_charge.text

    # The upgraded file opens as it is, with everything made since.
    restarted = start_provider(db_path, tmp_path / "logs")
    try:
        with restarted.client() as client:
            again = charge_by_key(client, charge["idempotency_key"])
            charges = client.get("/charges").json()["charges"]
    finally:
        restarted.process.stop()
    assert (again["amount_captured_minor"], again["voided"]) == (500, False)
    assert [c["charge_id"] for c in charges] == [
        "ch_old_1",
        "ch_old_2",
        charge["charge_id"],
        new_charge.json()["charge_id"],
    ]


def test_a_ledger_from_a_newer_provider_is_refused(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()

    with pytest.raises(LedgerVersionError, match="version 99"):
        Ledger.open(db_path)
