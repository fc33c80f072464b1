"""Notifications outlive the provider process: an event made is sent after a restart; the
endpoint can be set from the settings; an older ledger is upgraded in place; an event no one
acknowledges is given up after its maximum age."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from fake_provider.ledger import Ledger
from fake_provider.ledger_schema import VERSION
from fake_provider.notify_outbox import Destination
from fake_provider.settings import FakeProviderSettings
from tests.fake_provider.event_receiver import SECRET, receiving, signed_correctly
from tests.fake_provider.notification_calls import endpoint, events, notifying
from tests.fake_provider.provider import (
    charge_body,
    charge_by_key,
    new_account,
    new_key,
    post_charge,
    start_provider,
)
from tests.support.control.processes import free_port
from tests.support.control.waiting import wait_until


def notify_env(url: str) -> dict[str, str]:
    return {
        "PAYMENTS_FAKE_PROVIDER_NOTIFY_URL": url,
        "PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET": SECRET,
    }


def test_an_event_made_before_a_restart_is_sent_after_it(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    port = free_port()
    url = f"http://127.0.0.1:{port}/events"
    # Nothing listens at `url` yet: every attempt fails until the provider stops.
    first = start_provider(db_path, tmp_path / "logs", env=notify_env(url))
    try:
        with first.client() as client:
            charge = post_charge(client, new_key(), charge_body(account_id=new_account())).json()
            wait_until(
                lambda: bool(events(client)[0]["deliveries"][0]["attempts"]),
                message="a first attempt, refused",
            )
            [before] = events(client)
    finally:
        first.process.stop()

    with receiving(port) as receiver:
        # Restarted without an endpoint: what was made is sent, nothing new is made.
        second = start_provider(db_path, tmp_path / "logs")
        try:
            with second.client() as client:
                [arrival] = receiver.wait_for(1)
                # No endpoint now: the one event listed below is the first provider's.
                post_charge(client, new_key(), charge_body())
                wait_until(
                    lambda: events(client)[0]["deliveries"][0]["state"] == "delivered",
                    message="the delivery recorded",
                )
                [after] = events(client)
        finally:
            second.process.stop()

    assert signed_correctly(arrival)
    assert arrival.event["id"] == before["id"]
    assert arrival.event["data"]["object"] == charge
    assert arrival.body.decode() == before["body"]
    attempts = after["deliveries"][0]["attempts"]
    assert attempts[0]["status"] is None
    assert attempts[0]["error"]
    assert attempts[-1]["status"] == 200


def test_the_settings_set_the_development_merchants_endpoint(tmp_path: Path) -> None:
    with receiving() as receiver:
        # Without the admin API, too: the settings are the only way in.
        provider = start_provider(
            tmp_path / "ledger.sqlite3",
            tmp_path / "logs",
            env={**notify_env(receiver.url), "PAYMENTS_FAKE_PROVIDER_ADMIN": "0"},
        )
        try:
            with provider.client() as client:
                charge = post_charge(client, new_key(), charge_body()).json()
                [arrival] = receiver.wait_for(1)
                admin = client.get("/_notifications")
        finally:
            provider.process.stop()

    assert signed_correctly(arrival)
    assert arrival.event["data"]["object"] == charge
    assert admin.status_code == 404


@pytest.mark.parametrize(
    ("variables", "problem"),
    [
        ({"NOTIFY_URL": "http://127.0.0.1:9/events"}, "set together or not at all"),
        ({"NOTIFY_SECRET": SECRET}, "set together or not at all"),
        ({"NOTIFY_URL": "ftp://127.0.0.1/events", "NOTIFY_SECRET": SECRET}, "notify_url"),
        ({"NOTIFY_URL": "http://127.0.0.1:9/", "NOTIFY_SECRET": "sk_not_a_secret"}, "whsec_"),
        ({"NOTIFY_MAX_AGE_S": "0"}, "notify_max_age_s"),
    ],
    ids=["url-alone", "secret-alone", "not-http", "not-whsec", "no-age"],
)
def test_notification_settings_that_do_not_hold_stop_the_provider(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], problem: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(f"PAYMENTS_FAKE_PROVIDER_{name}", value)

    with pytest.raises(ValidationError) as raised:
        FakeProviderSettings()

    assert problem in str(raised.value)
    assert SECRET not in str(raised.value)
    assert "sk_not_a_secret" not in str(raised.value)


def test_the_settings_repr_hides_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENTS_FAKE_PROVIDER_NOTIFY_URL", "http://127.0.0.1:9/events")
    monkeypatch.setenv("PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET", SECRET)

    settings = FakeProviderSettings()

    assert SECRET not in repr(settings)
    assert settings.notify_endpoint() == Destination("dev", "http://127.0.0.1:9/events", SECRET)


def test_a_ledger_from_before_notifications_is_upgraded_in_place(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    Ledger.open(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TABLE notification_attempts")
        conn.execute("DROP TABLE notification_outbox")
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO charges (charge_id, idempotency_key, amount_minor, currency, account_id,"
            " reference, status, created_at, capture) VALUES ('ch_v1', 'v1-1', 700, 'EUR',"
            " 'acc_1', '', 'authorized', '2025-01-31T10:00:00.000000Z', 'manual')"
        )
    conn.close()

    with receiving() as receiver:
        provider = start_provider(db_path, tmp_path / "logs", env=notify_env(receiver.url))
        try:
            with provider.client() as client:
                old = charge_by_key(client, "v1-1")
                capture = client.post(
                    "/charges/ch_v1/captures",
                    json={"amount_minor": 700},
                    headers={"Idempotency-Key": new_key()},
                )
                [arrival] = receiver.wait_for(1)
        finally:
            provider.process.stop()
    with sqlite3.connect(db_path) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        outbox = conn.execute("SELECT type FROM notification_outbox").fetchall()
    conn.close()

    assert (old["charge_id"], old["status"], old["capture"]) == ("ch_v1", "authorized", "manual")
    assert capture.status_code == 201, capture.text
    assert arrival.event["type"] == "capture.succeeded"
    assert arrival.event["data"]["object"] == capture.json()
    assert version == VERSION == 2
    assert outbox == [("capture.succeeded",)]


def test_an_event_never_acknowledged_is_given_up_after_its_maximum_age(tmp_path: Path) -> None:
    env = {"PAYMENTS_FAKE_PROVIDER_NOTIFY_MAX_AGE_S": "2.5"}
    provider = start_provider(tmp_path / "ledger.sqlite3", tmp_path / "logs", env=env)
    try:
        with provider.client() as client, receiving() as receiver, notifying(client, receiver):
            receiver.answer(*[503] * 10)
            post_charge(client, new_key(), charge_body())
            wait_until(
                lambda: events(client)[0]["deliveries"][0]["state"] == "failed",
                message="the event given up",
            )
            [event] = events(client)
            counts = endpoint(client)
            arrivals = receiver.arrivals()
    finally:
        provider.process.stop()

    [delivery] = event["deliveries"]
    # Attempts at 0 s and 1 s; the next, 2 s later, would be past 2.5 s.
    assert [a["status"] for a in delivery["attempts"]] == [503, 503]
    assert len(arrivals) == 2
    assert delivery["reason"] == "no 2xx answer within 2.5 s"
    assert delivery["next_attempt_at"] is None
    assert (counts["sent"], counts["failed"], counts["pending"]) == (2, 1, 0)
