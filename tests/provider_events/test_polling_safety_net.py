"""Polling as the safety net (`app/recovery/policy.py`): while every provider's notifications
are configured, a check of an unknown operation waits at least PAYMENTS_NOTIFIED_RECHECK_S,
the provider's event settling it first; a notification lost on the way still leaves the
operation to that check, which finds the charge by lookup.

First the policy from its settings, number by number; then a real system whose provider
drops both the answer and the notification."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.recovery.policy import NOTIFIED_SPREAD, RecoveryPolicy
from app.settings import Settings
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.provider_events import new_secret, secrets_setting
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import operation, payment_for, transitions

SECRET = new_secret()
BACKOFF = {"backoff_base_s": 0.5, "backoff_max_s": 2.0, "max_attempts": 3}


def _policy(secrets: dict[str, list[str]], **settings: Any) -> RecoveryPolicy:
    return RecoveryPolicy.from_settings(
        Settings.model_validate({**BACKOFF, "provider_event_secrets": secrets, **settings})
    )


def test_with_every_provider_notifying_a_check_waits_at_least_the_notified_recheck() -> None:
    policy = _policy({"primary": [SECRET]}, notified_recheck_s=30)
    for attempts in (0, 1, 5, 80):
        for schedule in (policy.after_send(attempts), policy.after_check(attempts)):
            assert 30.0 <= schedule.delay_s <= 30.0 * NOTIFIED_SPREAD
    # The attempts and the flag are the backoff's, as without notifications.
    assert policy.after_check(2).attempts == 3
    assert policy.after_check(2).needs_attention


def test_a_breakers_held_back_resend_is_not_stretched() -> None:
    policy = _policy({"primary": [SECRET]}, notified_recheck_s=30)
    assert policy.while_circuit_open(1, 4.0).delay_s == 4.0


@pytest.mark.parametrize(
    ("secrets", "settings"),
    [
        ({}, {}),
        # One of two providers without secrets: nothing of its would be taken.
        (
            {"primary": [SECRET]},
            {
                "providers": [
                    {"name": "primary", "url": "http://127.0.0.1:1"},
                    {"name": "secondary", "url": "http://127.0.0.1:2"},
                ]
            },
        ),
        # Turned off.
        ({"primary": [SECRET]}, {"notified_recheck_s": 0}),
    ],
)
def test_without_every_provider_notifying_the_backoff_alone_decides(
    secrets: dict[str, list[str]], settings: dict[str, Any]
) -> None:
    policy = _policy(secrets, **settings)
    assert policy.notified_wait_s == 0.0
    assert all(policy.after_check(3).delay_s <= 2.0 for _ in range(50))


def test_a_backoff_longer_than_the_notified_recheck_is_kept() -> None:
    # A first check after 100 s * 2**1, drawn from its upper half: past the 1 s asked.
    policy = _policy(
        {"primary": [SECRET]}, notified_recheck_s=1, backoff_base_s=100.0, backoff_max_s=400.0
    )
    assert all(100.0 <= policy.after_check(0).delay_s <= 200.0 for _ in range(50))


# -- a lost notification, found by lookup ------------------------------------------------

RECHECK_S = 3.0


@dataclass(frozen=True)
class Notified:
    client: httpx.Client
    faults: FaultInjector
    provider_url: str


@pytest.fixture
def notified(spawn: Spawner, work_dir: Path, tenant: TenantHandle) -> Iterator[Notified]:
    provider = spawn.provider(work_dir / f"safety-net-{uuid.uuid4().hex[:8]}.sqlite3")
    assert provider.url is not None
    settings = {
        "PAYMENTS_PROVIDER_URL": provider.url,
        **secrets_setting({"primary": [SECRET]}),
        # Recovery as quick as it goes, but for the notified recheck.
        "PAYMENTS_NOTIFIED_RECHECK_S": str(RECHECK_S),
        "PAYMENTS_BACKOFF_BASE_S": "0.2",
        "PAYMENTS_BACKOFF_MAX_S": "0.4",
        "PAYMENTS_RECONCILE_INTERVAL_S": "0.2",
        "PAYMENTS_PROVIDER_EVENTS_INTERVAL_S": "0.1",
    }
    api = spawn.api(**settings)
    spawn.worker(once=False, **settings)
    configured = httpx.put(
        f"{provider.url}/_notifications",
        json={"url": f"{api.url}/provider-events/primary", "secret": SECRET},
        timeout=10,
    )
    assert configured.status_code == 200, configured.text
    with api_client(api, tenant) as client:
        yield Notified(client, FaultInjector(provider.url), provider.url)


def test_a_lost_notification_leaves_the_payment_to_the_check_which_finds_it_by_lookup(
    notified: Notified, db: psycopg.Connection[DictRow]
) -> None:
    body = payment_body()
    notified.faults.add("drop_after_commit", account_id=body["account_id"])
    notified.faults.add("notify_drop", account_id=body["account_id"])
    lost = post_payment(notified.client, body, key=new_key())
    assert lost.status_code == 202, lost.text
    operation_id = lost.json()["operation_id"]

    # The first check is set no sooner than the notified recheck (the backoff says 0.2 s).
    [unknown] = [
        t for t in transitions(db, operation_id) if t["to_state"] == "UNKNOWN_REQUIRES_RECOVERY"
    ]
    due = operation(db, operation_id)["next_check_at"]
    assert due - unknown["created_at"] >= timedelta(seconds=RECHECK_S)

    wait_until(
        lambda: operation(db, operation_id)["state"] == "COMPLETED",
        timeout=30,
        message="the check to find the charge",
    )
    [completed] = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
    assert completed["actor"].startswith("worker:"), completed
    assert "found by provider lookup" in (completed["reason"] or "")
    assert completed["created_at"] - unknown["created_at"] >= timedelta(seconds=RECHECK_S)

    # No notification told of it: the provider dropped its event, our inbox has none.
    key = payment_for(db, operation_id)["provider_key"]
    events = httpx.get(f"{notified.provider_url}/_notifications/events", timeout=10).json()
    [dropped] = [e for e in events["events"] if e["idempotency_key"] == key]
    assert [d["state"] for d in dropped["deliveries"]] == ["dropped"]
    kept = db.execute("SELECT 1 FROM provider_events WHERE provider_key = %s", (key,)).fetchall()
    assert kept == []
    assert len(notified.faults.charges(idempotency_key=key)) == 1
