"""Webhook receivers for tests (real processes), and the settings of a quick dispatcher."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

from tests.support.processes import Process, free_port, start_process

# A worker that delivers quickly: a pass every 0.1 s, short timeout and lease, tiny backoff.
FAST_WEBHOOKS: dict[str, str] = {
    "PAYMENTS_WEBHOOK_INTERVAL_S": "0.1",
    "PAYMENTS_WEBHOOK_TIMEOUT_S": "2",
    "PAYMENTS_WEBHOOK_LEASE_S": "4",
    "PAYMENTS_WEBHOOK_BACKOFF_BASE_S": "0.1",
    "PAYMENTS_WEBHOOK_BACKOFF_MAX_S": "0.3",
    # This worker is here to deliver: it leaves other tests' operations alone as long as
    # it can (their own workers reconcile them).
    "PAYMENTS_RECONCILE_INTERVAL_S": "3600",
    # A few connections are enough for a worker (and the database server is shared).
    "PAYMENTS_DB_POOL_SIZE": "4",
}


@dataclass
class Receiver:
    """A `tests.support.receiver` process and the requests it recorded."""

    process: Process
    log: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def answered(self) -> list[dict[str, Any]]:
        """Requests answered 2xx."""
        return [r for r in self.records() if r["status"] == 200]

    def mode(self, mode: str, times: int | None = None) -> None:
        rule: dict[str, Any] = {"mode": mode}
        if times is not None:
            rule["times"] = times
        httpx.post(f"http://127.0.0.1:{self.port}/_mode", json=rule, timeout=5).raise_for_status()

    def release(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/_release", timeout=5).raise_for_status()


def start_receiver(log_dir: Path, log: Path, *, port: int | None = None) -> Receiver:
    port = port or free_port()
    process = start_process(
        "receiver",
        [sys.executable, "-m", "tests.support.receiver", "--port", str(port), "--log", str(log)],
        log_dir=log_dir,
        ready_url=f"http://127.0.0.1:{port}/healthz",
        url=f"http://127.0.0.1:{port}",
    )
    return Receiver(process, log, port)


def verified(record: dict[str, Any], secret: str) -> dict[str, Any]:
    """The event in a recorded request, checked by the reference Standard Webhooks library."""
    event: dict[str, Any] = Webhook(secret).verify(record["body"], record["headers"])
    return event


def create_endpoint(client: httpx.Client, url: str, **extra: Any) -> dict[str, Any]:
    created = client.post("/webhook-endpoints", json={"url": url, **extra})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body
