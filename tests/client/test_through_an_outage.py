"""The client paying through a provider outage that opens the API's circuit breaker.

It must neither hammer the API while the breaker is open (it honours `Retry-After`, which is
the rest of the cool-down) nor give up before its deadline: the payment ends charged once.
"""

from __future__ import annotations

from client import RetryEvent
from tests.client.conftest import client_for
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_account
from tests.support.factories.tenants import TenantHandle

COOLDOWN_S = 3


def test_a_client_retrying_through_an_outage_waits_it_out_and_pays_once(
    spawn: Spawner, tenant: TenantHandle, faults: FaultInjector
) -> None:
    api = spawn.api(
        PAYMENTS_BREAKER_FAILURES="2",
        PAYMENTS_BREAKER_COOLDOWN_S=str(COOLDOWN_S),
        PAYMENTS_PROVIDER_TIMEOUT_S="1",
    )
    account = new_account()
    # Two sends hang: the first attempt and the resend of the client's first retry. The
    # second failure opens the breaker; the provider is healthy again afterwards.
    faults.add("timeout_before_commit", account_id=account, times=2, delay_s=5)
    events: list[RetryEvent] = []

    with client_for(api, tenant, deadline=60.0, on_retry=events.append) as payments:
        payment = payments.create_payment("10.00", "EUR", account)

    assert payment.status == "SUCCEEDED"
    assert len(faults.charges(reference=payment.payment_id)) == 1
    # Not hammering: a handful of requests, and it waited at least the cool-down in all.
    assert 2 <= len(events) <= 8, [(e.status, e.delay_s) for e in events]
    assert sum(e.delay_s for e in events) >= COOLDOWN_S - 1, [e.delay_s for e in events]
