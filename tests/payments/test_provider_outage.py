"""A provider outage behind the circuit breaker: fail fast, send nothing, recover by itself."""

from __future__ import annotations

import re
import time

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.ledger import assert_completed_once
from tests.support.readers.operations import operation_by_key, transitions

BREAKER = {
    "PAYMENTS_BREAKER_FAILURES": "2",
    "PAYMENTS_BREAKER_COOLDOWN_S": "3",
    "PAYMENTS_PROVIDER_TIMEOUT_S": "1",
}


def _breaker_state(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(
        r'^payments_provider_breaker_state\{provider="primary"\} (\S+)$', text, re.MULTILINE
    )
    assert found is not None, "the breaker's state is a metric"
    return float(found.group(1))


def test_an_outage_opens_the_breaker_sends_nothing_and_every_payment_ends_charged_once(
    spawn: Spawner,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    api = spawn.api(**BREAKER)
    assert api.admin_url is not None
    account = payment_body()["account_id"]
    rule = faults.add("timeout_before_commit", account_id=account, times=20, delay_s=5)
    keys = [new_key() for _ in range(4)]
    body = payment_body(account_id=account)
    with api_client(api, tenant) as client:
        # Two sends hang past the provider timeout: outcome unknown, and the breaker opens.
        for key in keys[:2]:
            assert post_payment(client, body, key=key).status_code == 202
        assert _breaker_state(api.admin_url) == 2

        # While it is open, payments are refused at once and nothing reaches the provider.
        for key in keys[2:]:
            started = time.monotonic()
            refused = post_payment(client, body, key=key)
            took = time.monotonic() - started
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "PROVIDER_UNAVAILABLE"
            assert 1 <= int(refused.headers["retry-after"]) <= 3
            assert took < 0.5, f"refused in {took:.2f} s, not at once"
            row = operation_by_key(db, tenant, key)
            assert row is not None
            assert row["state"] == "FAILED_RETRYABLE"
        # A retry of an unknown payment while it is open: the lookup goes through (lookups
        # are never blocked), the resend does not; no attempt is counted, and the payment
        # is due again when the cool-down ends.
        held = post_payment(client, body, key=keys[0])
        assert held.status_code == 202, held.text
        assert held.json()["attempts"] == 0
        assert 1 <= int(held.headers["retry-after"]) <= 3
        # Tenants see no free-text reason (a neutral history); the audit row keeps it.
        assert held.json()["history"][-1]["trigger"] == "lose"
        last = transitions(db, held.json()["operation_id"])[-1]
        assert (last["trigger"], "circuit breaker" in last["reason"]) == ("lose", True), last
        (left,) = [r for r in faults.remaining() if r["id"] == rule["id"]]
        assert left["remaining"] == 18, "a refused send reached the provider"

        # The outage ends; once the cool-down is over, a retry probes, succeeds and closes
        # the breaker.
        faults.clear()
        wait_until(
            lambda: post_payment(client, body, key=keys[2]).status_code == 201,
            timeout=30,
            interval=0.5,
            message="a retry after the cool-down to be charged",
        )
        assert _breaker_state(api.admin_url) == 0
        # Every payment, refused or unknown, is charged once on retry with its key.
        for key in (keys[3], keys[0], keys[1]):
            assert post_payment(client, body, key=key).status_code == 201
    for key in keys:
        row = operation_by_key(db, tenant, key)
        assert row is not None
        assert_completed_once(db, faults, row["id"])
