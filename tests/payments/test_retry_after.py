"""The Retry-After of a payment the provider certainly did not process (503, FAILED_RETRYABLE).

It is the provider's own wait when it gave one, the rest of the circuit breaker's cool-down
when the breaker held the send back, and one second when nothing says more (a provider that
refuses the connection gives no wait at all): a client that waits what it is told and retries
with the same key is neither turned away again at once nor kept waiting for nothing.
"""

from __future__ import annotations

import socket

from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client


def _closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_refused_connection_is_retried_after_one_second(
    spawn: Spawner, tenant: TenantHandle
) -> None:
    api = spawn.api(PAYMENTS_PROVIDER_URL=f"http://127.0.0.1:{_closed_port()}")
    key = new_key()
    with api_client(api, tenant) as client:
        refused = post_payment(client, payment_body(), key=key)
        assert refused.status_code == 503, refused.text
        # The problem names the payment and its operation, for the retry to refer to.
        operation = client.get("/operations", params={"idempotency_key": key}).json()
    problem = refused.json()
    assert problem["code"] == "PROVIDER_UNAVAILABLE"
    assert (problem["operation_id"], problem["payment_id"]) == (
        operation["operation_id"],
        operation["payment_id"],
    )
    assert refused.headers["retry-after"] == "1"


def test_a_send_the_open_breaker_holds_back_waits_out_the_cool_down(
    spawn: Spawner, tenant: TenantHandle, faults: FaultInjector
) -> None:
    cooldown_s = 60
    api = spawn.api(PAYMENTS_BREAKER_FAILURES="1", PAYMENTS_BREAKER_COOLDOWN_S=str(cooldown_s))
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    with api_client(api, tenant) as client:
        # The provider refuses it and asks for a second; the breaker opens on it.
        first = post_payment(client, body, key=new_key())
        assert first.status_code == 503, first.text
        assert first.headers["retry-after"] == "1"
        # Held back without a send: wait for the cool-down, not for one second.
        held = post_payment(client, body, key=new_key())
    assert held.status_code == 503, held.text
    assert cooldown_s - 10 <= int(held.headers["retry-after"]) <= cooldown_s
