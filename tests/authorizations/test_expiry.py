"""The expiry of lapsed holds, one batch at a time, run on its own against the test database
(`HoldExpiry.run`, as the worker runs it; `tests/authorizations/test_recovery.py` runs it
through a worker process).

The authorizations are made through the API; a hold is made to lapse by moving its
`capture_before` into the past. Holds that lapsed long ago (in 2000) come before any other
test's in the batch's order (`capture_before`), so a batch of one takes the one expected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.authorizations.expiry import HoldExpiry
from app.operations.values import EventWrite
from tests.support.control.processes import Process
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.tenants import api_client, make_tenant
from tests.support.fixtures.repository import AsyncDb

LONG_AGO = "2000-01-01T00:00:00Z"


class Expiry:
    """A `HoldExpiry` on the application's own pool, with the events it handed to
    `deliver` (the composition root's fan-out, here only counted)."""

    def __init__(self, async_db: AsyncDb):
        self.async_db = async_db
        self.delivered: list[EventWrite] = []
        self.job = HoldExpiry(async_db.db, self._deliver)

    def _deliver(self, event: EventWrite) -> EventWrite:
        self.delivered.append(event)
        return event

    def run(self, limit: int) -> int:
        return self.async_db.run(asyncio.wait_for(self.job.run(limit), timeout=15))

    def run_all(self) -> None:
        """Batches until one comes back short: every lapsed hold of the database is done."""
        while self.run(100) == 100:
            pass


@pytest.fixture
def expiry(async_db: AsyncDb) -> Expiry:
    return Expiry(async_db)


def _lapse(db: psycopg.Connection[DictRow], payment: dict[str, Any], at: str = LONG_AGO) -> None:
    db.execute("UPDATE payments SET capture_before = %s WHERE id = %s", (at, payment["payment_id"]))


def _status(db: psycopg.Connection[DictRow], payment: dict[str, Any]) -> str:
    row = db.execute("SELECT status FROM payments WHERE id = %s", (payment["payment_id"],))
    found = row.fetchone()
    assert found is not None
    status: str = found["status"]
    return status


def _updated_at(db: psycopg.Connection[DictRow], payment: dict[str, Any]) -> datetime:
    found = db.execute(
        "SELECT updated_at FROM payments WHERE id = %s", (payment["payment_id"],)
    ).fetchone()
    assert found is not None
    at: datetime = found["updated_at"]
    return at


def _expired_events(db: psycopg.Connection[DictRow], payment: dict[str, Any]) -> list[Any]:
    rows = db.execute(
        "SELECT data FROM events WHERE operation_id = %s AND type = 'payment.expired'",
        (payment["operation_id"],),
    ).fetchall()
    return [row["data"] for row in rows]


@pytest.fixture
def untouched(client: httpx.Client) -> dict[str, Any]:
    return authorized(client, amount="10.00")


def test_a_lapsed_hold_expires_and_one_partly_captured_is_captured(
    client: httpx.Client,
    db: psycopg.Connection[DictRow],
    expiry: Expiry,
    untouched: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    partly = authorized(client, amount="10.00")
    assert post_capture(client, partly["payment_id"], "3.00").status_code == 201
    open_ = authorized(client, amount="10.00")
    for payment in (untouched, partly):
        _lapse(db, payment)
    before = _updated_at(db, untouched)

    with caplog.at_level(logging.INFO, logger="payments.authorizations"):
        expiry.run_all()

    assert (_status(db, untouched), _status(db, partly), _status(db, open_)) == (
        "EXPIRED",
        "CAPTURED",
        "AUTHORIZED",
    )
    assert _updated_at(db, untouched) > before
    [expired] = _expired_events(db, untouched)
    assert (expired["status"], expired["amount_captured"], expired["amount_capturable"]) == (
        "EXPIRED",
        "0.00",
        "0.00",
    )
    [captured] = _expired_events(db, partly)
    assert (captured["status"], captured["amount_captured"]) == ("CAPTURED", "3.00")
    assert _expired_events(db, open_) == []
    # Each event went through the fan-out, once.
    mine = {untouched["payment_id"], partly["payment_id"]}
    handed = [e.params["e_data"].obj["payment_id"] for e in expiry.delivered]
    assert sorted(p for p in handed if p in mine) == sorted(mine)
    logged = [r for r in caplog.records if r.getMessage() == "authorizations expired"]
    assert logged, "the batch that expired holds is logged"
    assert all(r.__dict__["fields"]["expired"] > 0 for r in logged)


def test_a_batch_with_nothing_to_expire_changes_and_logs_nothing(
    expiry: Expiry, caplog: pytest.LogCaptureFixture
) -> None:
    expiry.run_all()
    expiry.delivered.clear()
    with caplog.at_level(logging.INFO, logger="payments.authorizations"):
        assert expiry.run(10) == 0
    assert expiry.delivered == []
    assert not [r for r in caplog.records if r.getMessage() == "authorizations expired"]


def test_a_batch_takes_the_longest_lapsed_first_and_no_more_than_its_limit(
    client: httpx.Client, db: psycopg.Connection[DictRow], expiry: Expiry
) -> None:
    expiry.run_all()  # what other tests left lapsed
    # Made in the other order than they lapsed: the batch's order is the lapse's.
    later = authorized(client)
    sooner = authorized(client)
    _lapse(db, later, "2000-01-02T00:00:00Z")
    _lapse(db, sooner, LONG_AGO)

    assert expiry.run(1) == 1
    assert (_status(db, sooner), _status(db, later)) == ("EXPIRED", "AUTHORIZED")
    assert expiry.run(1) == 1
    assert _status(db, later) == "EXPIRED"


def test_a_hold_is_kept_while_a_capture_or_void_is_in_flight(
    db: psycopg.Connection[DictRow], expiry: Expiry, untouched: dict[str, Any]
) -> None:
    # The mark the claim's statement sets (`modifying_operation_id`), here set by hand.
    _lapse(db, untouched)
    db.execute(
        "UPDATE payments SET modifying_operation_id = operation_id WHERE id = %s",
        (untouched["payment_id"],),
    )
    expiry.run_all()
    assert _status(db, untouched) == "AUTHORIZED"
    assert _expired_events(db, untouched) == []

    db.execute(
        "UPDATE payments SET modifying_operation_id = NULL WHERE id = %s",
        (untouched["payment_id"],),
    )
    expiry.run_all()
    assert _status(db, untouched) == "EXPIRED"


def test_a_hold_in_flight_takes_no_place_in_a_batch(
    client: httpx.Client, db: psycopg.Connection[DictRow], expiry: Expiry, untouched: dict[str, Any]
) -> None:
    expiry.run_all()  # what other tests left lapsed
    # The one in flight lapsed first, so it would be the first of the batch's order.
    free = authorized(client)
    _lapse(db, untouched, LONG_AGO)
    _lapse(db, free, "2000-01-02T00:00:00Z")
    db.execute(
        "UPDATE payments SET modifying_operation_id = operation_id WHERE id = %s",
        (untouched["payment_id"],),
    )

    assert expiry.run(1) == 1
    assert (_status(db, untouched), _status(db, free)) == ("AUTHORIZED", "EXPIRED")
    db.execute(
        "UPDATE payments SET modifying_operation_id = NULL WHERE id = %s",
        (untouched["payment_id"],),
    )


def test_only_an_open_hold_past_its_window_expires(
    client: httpx.Client, db: psycopg.Connection[DictRow], expiry: Expiry, untouched: dict[str, Any]
) -> None:
    voided = authorized(client)
    assert post_void(client, voided["payment_id"]).status_code == 201
    captured = authorized(client)
    assert post_capture(client, captured["payment_id"]).status_code == 201
    for payment in (voided, captured):
        _lapse(db, payment)

    expiry.run_all()

    # Within its window (7 days from now), or already final: left as it is.
    assert (_status(db, untouched), _status(db, voided), _status(db, captured)) == (
        "AUTHORIZED",
        "VOIDED",
        "CAPTURED",
    )
    for payment in (untouched, voided, captured):
        assert _expired_events(db, payment) == []


@pytest.fixture
def locked(database_url: str, untouched: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """`untouched`, lapsed and locked by a claim's lock held on another connection."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE payments SET capture_before = %s WHERE id = %s",
            (LONG_AGO, untouched["payment_id"]),
        )
        conn.commit()
        conn.execute(
            "SELECT 1 FROM payments WHERE id = %s FOR NO KEY UPDATE", (untouched["payment_id"],)
        )
        yield untouched
        conn.rollback()


def test_a_hold_a_claim_has_locked_is_skipped_not_waited_for(
    db: psycopg.Connection[DictRow],
    expiry: Expiry,
    locked: dict[str, Any],
) -> None:
    payment = locked
    # Within the run's 15 s: a batch that waited for the lock would not come back.
    expiry.run_all()
    assert _status(db, payment) == "AUTHORIZED"


def test_the_tenants_batches_go_together_in_one_round_trip(
    api: Process,
    client: httpx.Client,
    db: psycopg.Connection[DictRow],
    expiry: Expiry,
    untouched: dict[str, Any],
) -> None:
    # Room for one each: both tenants' statements are sent in one pipeline, one transaction
    # (one xmin on the payments it moved and their events), each still naming its tenant.
    expiry.run_all()  # what other tests left lapsed
    with api_client(api, make_tenant(db, "another tenant")) as other_client:
        other = authorized(other_client, amount="10.00")
    for payment in (untouched, other):
        _lapse(db, payment)
    assert expiry.run(2) == 2
    rows = db.execute(
        "SELECT xmin::text AS xmin FROM payments WHERE id = ANY(%(payments)s)"
        " UNION SELECT xmin::text FROM events"
        " WHERE operation_id = ANY(%(operations)s) AND type = 'payment.expired'",
        {
            "payments": [untouched["payment_id"], other["payment_id"]],
            "operations": [untouched["operation_id"], other["operation_id"]],
        },
    ).fetchall()
    assert len(rows) == 1
    assert len(_expired_events(db, untouched) + _expired_events(db, other)) == 2
