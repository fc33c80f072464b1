"""The webhook metrics: events pending, the oldest wait, deliveries by outcome."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.support.payments import new_key, post_payment
from tests.support.processes import Process, free_port, wait_until
from tests.support.spawning import Spawner
from tests.support.webhooks import FAST_WEBHOOKS, create_endpoint


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in metrics"
    return float(found.group(1))


def test_pending_events_and_their_age_are_reported(api: Process, client: httpx.Client) -> None:
    # Nobody listens there, and no worker runs: the delivery stays pending.
    endpoint = create_endpoint(client, f"http://127.0.0.1:{free_port()}/hook")
    assert post_payment(client, key=new_key()).status_code == 201

    def reported() -> bool:
        text = httpx.get(f"{api.admin_url}/metrics").text
        return (
            sample(text, "payments_webhook_events_pending") >= 1
            and sample(text, "payments_webhook_oldest_undelivered_age_seconds") > 0
        )

    wait_until(reported, message="the webhook backlog gauges")
    # Deleting the endpoint cancels the delivery: no later test's worker keeps retrying it.
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204


def test_deliveries_are_counted_by_outcome(
    spawn: Spawner, tmp_path: Path, client: httpx.Client
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("fail", times=1)
    create_endpoint(client, receiver.url)
    port = free_port()
    spawn.worker(once=False, **FAST_WEBHOOKS, PAYMENTS_WORKER_METRICS_PORT=str(port))
    assert post_payment(client, key=new_key()).status_code == 201
    wait_until(lambda: len(receiver.answered()) == 1, message="the webhook")

    def counted() -> bool:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        retry = 'payments_webhook_deliveries_total{outcome="retry"}'
        succeeded = 'payments_webhook_deliveries_total{outcome="succeeded"}'
        return sample(text, retry) >= 1 and sample(text, succeeded) >= 1

    wait_until(counted, message="the deliveries counter")
