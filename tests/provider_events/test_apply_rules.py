"""The apply step's rules one by one, run in the test process: `EventApplication` on the
runtime the worker builds (`app/composition.py`: the same reconcilers, against the session's
database and fake provider), each event claimed and handled once, and what it left in the
inbox read back. `test_apply.py` runs the same step in a worker process, end to end.

Each event is put in the inbox as the receiver keeps it, due long ago, so that a claim of
one takes it before any other test's. Times the step writes (`next_attempt_at`) are checked
against the database clock read just before and just after the step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from app.composition import runtime
from app.observability.metrics import Metrics
from app.provider_events.apply import CLAIM_LEASES, EventApplication, StoredEvent, backoff_s
from app.settings import Settings
from app.settlement.notified import NotifiedRecords
from tests.support.control.faults import FaultInjector
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.provider_events import event

PROVIDER = "primary"
_PUT = """
    INSERT INTO provider_events (provider, event_id, type, provider_key, body, attempts,
                                 received_at, next_attempt_at)
    VALUES (%(provider)s, %(event_id)s, %(type)s, %(provider_key)s, %(body)s, %(attempts)s,
            now() - make_interval(secs => %(age_s)s), '2000-01-01T00:00:00Z')
    RETURNING id
"""


@dataclasses.dataclass
class Inbox:
    """The apply step, and the inbox it works on."""

    runner: asyncio.Runner
    step: EventApplication
    db: psycopg.Connection[DictRow]

    def put(
        self,
        provider_key: str | None,
        *,
        type: str = "charge.succeeded",
        attempts: int = 0,
        age_s: float = 0.0,
    ) -> int:
        """An event as the receiver keeps it, `age_s` old, tried `attempts` times before."""
        body = event(type=type)
        row = self.db.execute(
            _PUT,
            {
                "provider": PROVIDER,
                "event_id": body["id"],
                "type": type,
                "provider_key": provider_key,
                "body": Jsonb(body),
                "attempts": attempts,
                "age_s": age_s,
            },
        ).fetchone()
        assert row is not None
        event_id: int = row["id"]
        return event_id

    def claim(self) -> StoredEvent:
        [claimed] = self.runner.run(self.step.claim(1))
        return claimed

    def apply(self, event_id: int) -> DictRow:
        """Claim the event, handle it, and read its row back."""
        claimed = self.claim()
        assert claimed.id == event_id
        self.runner.run(self.step.handle(claimed))
        return self.row(event_id)

    def row(self, event_id: int) -> DictRow:
        found = self.db.execute(
            "SELECT *, now() AS now FROM provider_events WHERE id = %s", (event_id,)
        ).fetchone()
        assert found is not None
        return found

    def now(self) -> datetime:
        found = self.db.execute("SELECT now() AS now").fetchone()
        assert found is not None
        now: datetime = found["now"]
        return now


@pytest.fixture
def inbox(
    base_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, db: psycopg.Connection[DictRow]
) -> Iterator[Inbox]:
    for name, value in base_env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    with asyncio.Runner() as runner:
        opened = runtime(settings, metrics=Metrics(), application_name="apply-tests")
        parts = runner.run(opened.__aenter__())
        try:
            step = EventApplication(
                db=parts.db,
                reconcilers=parts.reconcilers,
                contradictions=NotifiedRecords(),
                lease_s=settings.lease_s,
                key_ttl_s=settings.key_ttl_s,
                worker="tests",
            )
            yield Inbox(runner, step, db)
        finally:
            runner.run(opened.__aexit__(None, None, None))


def _key(db: psycopg.Connection[DictRow], payment: dict[str, Any]) -> str:
    row = db.execute(
        "SELECT provider_key FROM payments WHERE id = %s", (payment["payment_id"],)
    ).fetchone()
    assert row is not None
    key: str = row["provider_key"]
    return key


def _state(db: psycopg.Connection[DictRow], operation_id: str) -> str:
    row = db.execute("SELECT state FROM operations WHERE id = %s", (operation_id,)).fetchone()
    assert row is not None
    state: str = row["state"]
    return state


def _lost(client: httpx.Client, faults: FaultInjector) -> dict[str, Any]:
    """A payment the provider charged whose answer was lost: UNKNOWN_REQUIRES_RECOVERY."""
    body = payment_body()
    faults.add("drop_after_commit", account_id=body["account_id"])
    lost = post_payment(client, body, key=new_key())
    assert lost.status_code == 202, lost.text
    payment: dict[str, Any] = lost.json()
    return payment | {"account_id": body["account_id"]}


def _assert_due(
    inbox: Inbox, event_id: int, before: datetime, after: datetime, wait_s: float
) -> None:
    """The event is due `wait_s` after the step ran (between its start and its end)."""
    due = inbox.row(event_id)["next_attempt_at"]
    assert due - before >= timedelta(seconds=wait_s), (due, before)
    assert due - after <= timedelta(seconds=wait_s), (due, after)


# Waits.


@pytest.mark.parametrize(
    ("attempts", "wait_s"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 32.0), (7, 60.0), (8, 60.0)],
)
def test_a_parked_event_waits_twice_as_long_each_time_up_to_a_minute(
    attempts: int, wait_s: float
) -> None:
    assert backoff_s(attempts) == wait_s


def test_a_claim_leases_the_event_for_two_operation_leases_and_counts_the_try(
    inbox: Inbox,
) -> None:
    event_id = inbox.put(f"payment-{uuid.uuid4()}", attempts=2)
    before = inbox.now()
    claimed = inbox.claim()
    after = inbox.now()

    assert (claimed.id, claimed.attempts, claimed.provider) == (event_id, 3, PROVIDER)
    # The fixture's step has the settings' lease (a minute's hold at the default 30 s).
    _assert_due(inbox, event_id, before, after, CLAIM_LEASES * Settings().lease_s)


# Events about no operation.


def test_an_event_of_no_kind_or_without_a_key_is_rejected(inbox: Inbox) -> None:
    dispute = inbox.put(f"payment-{uuid.uuid4()}", type="dispute.created")
    row = inbox.apply(dispute)
    assert (row["state"], row["reason"]) == ("rejected", "no operation kind makes a 'dispute'")
    assert row["next_attempt_at"] is None

    keyless = inbox.put(None)
    row = inbox.apply(keyless)
    assert (row["state"], row["reason"]) == ("rejected", "no operation kind makes a 'charge'")


def test_an_event_for_no_operation_yet_is_looked_for_again_later(
    inbox: Inbox, caplog: pytest.LogCaptureFixture
) -> None:
    event_id = inbox.put(f"payment-{uuid.uuid4()}", attempts=3, age_s=86_399.5)
    before = inbox.now()
    with caplog.at_level(logging.INFO, logger="payments.provider_events"):
        row = inbox.apply(event_id)
    after = inbox.now()

    assert (row["state"], row["reason"]) == ("parked", "no operation under its key yet")
    assert row["operation_id"] is None
    # Its fourth try: 8 s.
    _assert_due(inbox, event_id, before, after, 8.0)
    [logged] = [r for r in caplog.records if r.getMessage() == "provider event handled"]
    assert logged.__dict__["fields"]["operation_id"] is None


def test_an_event_for_no_operation_within_a_day_is_left_to_settlement(inbox: Inbox) -> None:
    event_id = inbox.put(f"payment-{uuid.uuid4()}", age_s=86_400.5)
    row = inbox.apply(event_id)

    assert row["state"] == "parked"
    assert row["reason"] == (
        "no operation under its key within the match window; left to settlement"
    )
    assert row["next_attempt_at"] is None


# Events about an operation.


def test_an_event_for_a_final_operation_is_applied_without_a_write(
    inbox: Inbox,
    client: httpx.Client,
    db: psycopg.Connection[DictRow],
    caplog: pytest.LogCaptureFixture,
) -> None:
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201, paid.text
    event_id = inbox.put(_key(db, paid.json()))

    with caplog.at_level(logging.INFO, logger="payments.provider_events"):
        row = inbox.apply(event_id)

    operation_id = paid.json()["operation_id"]
    assert (row["state"], row["reason"]) == ("applied", "the operation is COMPLETED already")
    assert str(row["operation_id"]) == operation_id
    assert row["applied_at"] is not None
    assert row["next_attempt_at"] is None
    [logged] = [r for r in caplog.records if r.getMessage() == "provider event handled"]
    assert logged.__dict__["fields"]["operation_id"] == operation_id


def test_an_event_for_an_operation_waiting_for_its_clients_retry_is_applied(
    inbox: Inbox,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    refused = post_payment(client, body, key=new_key())
    assert refused.status_code == 503, refused.text
    operation_id = refused.json()["operation_id"]
    assert _state(db, operation_id) == "FAILED_RETRYABLE"
    event_id = inbox.put(_key(db, refused.json()))

    row = inbox.apply(event_id)

    assert (row["state"], str(row["operation_id"])) == ("applied", operation_id)
    assert row["reason"] == (
        "the operation waits for its client's retry, which records what the provider holds"
    )
    assert _state(db, operation_id) == "FAILED_RETRYABLE"


def test_an_event_for_an_operation_its_owner_holds_waits_a_second(
    inbox: Inbox,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    # An owner sending it, its lease live (set here by hand on a payment whose answer was
    # lost, so that nothing else moves it meanwhile).
    payment = _lost(client, faults)
    operation_id = payment["operation_id"]
    db.execute(
        "UPDATE operations SET state = 'PROVIDER_REQUEST_SENT', lease_owner = 'api:other',"
        " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        (operation_id,),
    )
    event_id = inbox.put(_key(db, payment), attempts=5)
    before = inbox.now()
    row = inbox.apply(event_id)
    after = inbox.now()

    assert (row["state"], str(row["operation_id"])) == ("parked", operation_id)
    assert row["reason"] == (
        "its owner holds a live lease; its outcome or the next check settles it"
    )
    # A second, whatever its tries: the owner's outcome is near.
    _assert_due(inbox, event_id, before, after, 1.0)
    assert _state(db, operation_id) == "PROVIDER_REQUEST_SENT"


def test_an_event_for_a_lost_answer_settles_it_by_a_lookup(
    inbox: Inbox,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = _lost(client, faults)
    operation_id = payment["operation_id"]
    event_id = inbox.put(_key(db, payment))

    row = inbox.apply(event_id)

    assert (row["state"], row["reason"]) == ("applied", "reconciled: Succeeded")
    assert str(row["operation_id"]) == operation_id
    assert _state(db, operation_id) == "COMPLETED"


def test_an_event_whose_lookup_settles_nothing_is_tried_again(
    inbox: Inbox,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = _lost(client, faults)
    faults.add("lookup_unavailable", times=1000, account_id=payment["account_id"])
    operation_id = payment["operation_id"]
    event_id = inbox.put(_key(db, payment), attempts=1)
    try:
        before = inbox.now()
        row = inbox.apply(event_id)
        after = inbox.now()
    finally:
        faults.clear()

    assert (row["state"], str(row["operation_id"])) == ("parked", operation_id)
    assert row["reason"].startswith("reconciled, not settled yet (")
    # Its second try: 2 s.
    _assert_due(inbox, event_id, before, after, 2.0)
    assert _state(db, operation_id) == "UNKNOWN_REQUIRES_RECOVERY"


# Shapes.


def test_a_claimed_event_cannot_be_changed() -> None:
    claimed = StoredEvent(1, PROVIDER, "charge.succeeded", None, datetime.now(), 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        claimed.attempts = 2  # type: ignore[misc]


def test_the_step_is_built_from_named_settings() -> None:
    parameters = inspect.signature(EventApplication.__init__).parameters
    named = [p for p in parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert [p.name for p in named] == [
        "db",
        "reconcilers",
        "contradictions",
        "lease_s",
        "key_ttl_s",
        "worker",
    ]
