"""Webhooks in the chaos run: a consumer that receives every event, and the final count.

The consumer is `examples/webhook_receiver.py` (an inbox table: each event applied once),
registered as the chaos tenant's endpoint for every event type. The workers deliver while
they are killed and paused; once the run has converged and every delivery is settled:

- every final outcome (`COMPLETED`, `FAILED`) has exactly one event, of the type its payment
  status says (a manual payment's: `payment.authorized`, whatever its captures, voids and
  expiry made of it since), or its capture's or void's (`payment.captured`,
  `payment.capture_failed`, `payment.voided`, `payment.void_failed`), and no operation that is
  not final has an outcome event;
- every manual payment whose hold lapsed (EXPIRED, or CAPTURED with less than its amount and
  no void) has exactly one `payment.expired` event, and no other payment has one;
- every event was delivered at least once (its id is in the consumer's inbox) and every
  delivery succeeded.
"""

from __future__ import annotations

import sqlite3
import sys
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from tests.support.control.processes import Process, free_port, start_process

REPO = Path(__file__).resolve().parent.parent

# Quick delivery and retries, so that everything is delivered within the run.
WEBHOOK_ENV: dict[str, str] = {
    "PAYMENTS_WEBHOOKS_ALLOW_LOCAL": "1",
    "PAYMENTS_WEBHOOK_INTERVAL_S": "0.2",
    "PAYMENTS_WEBHOOK_TIMEOUT_S": "2",
    "PAYMENTS_WEBHOOK_LEASE_S": "5",
    "PAYMENTS_WEBHOOK_BACKOFF_BASE_S": "0.2",
    "PAYMENTS_WEBHOOK_BACKOFF_MAX_S": "2",
}

# The event each final outcome must have, by operation and the subject's final status (a
# succeeded payment may since have been refunded in part or in full).
_OUTCOME_TYPES = {
    ("create_payment", "SUCCEEDED"): "payment.succeeded",
    ("create_payment", "PARTIALLY_REFUNDED"): "payment.succeeded",
    ("create_payment", "REFUNDED"): "payment.succeeded",
    ("create_payment", "DECLINED"): "payment.declined",
    ("create_payment", "FAILED"): "payment.failed",
    ("create_refund", "SUCCEEDED"): "refund.succeeded",
    ("create_refund", "FAILED"): "refund.failed",
    ("capture_payment", "SUCCEEDED"): "payment.captured",
    ("capture_payment", "FAILED"): "payment.capture_failed",
    ("void_payment", "SUCCEEDED"): "payment.voided",
    ("void_payment", "FAILED"): "payment.void_failed",
}
# A manual payment's outcome is its authorization, whatever became of the hold since.
_AUTHORIZED = "payment.authorized"
_EXPIRED = "payment.expired"
_NOT_HELD = frozenset({"DECLINED", "FAILED"})


def _outcome_type(name: str, status: str | None, capture_mode: str | None) -> str:
    if name == "create_payment" and capture_mode == "manual" and status not in _NOT_HELD:
        return _AUTHORIZED
    return _OUTCOME_TYPES.get((name, str(status)), "?")


def _lapsed(status: str | None, amount: int, captured: int, voided: bool) -> bool:
    """Whether a manual payment's hold lapsed: EXPIRED, or CAPTURED in part, not voided."""
    return status == "EXPIRED" or (status == "CAPTURED" and captured < amount and not voided)


class Consumer:
    """The example receiver, subscribed to every event of the chaos tenant."""

    def __init__(self, work_dir: Path):
        self.port = 0
        self.inbox = work_dir / "webhook-inbox.sqlite3"
        self.log_dir = work_dir / "logs"
        self.process: Process | None = None

    def start(self, api_url: str, api_key: str) -> None:
        # Chosen once the cluster's processes hold their ports.
        self.port = free_port()
        created = httpx.post(
            f"{api_url}/webhook-endpoints",
            json={"url": f"http://127.0.0.1:{self.port}/hook"},
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=30,
        )
        created.raise_for_status()
        self.process = start_process(
            "webhook-consumer",
            [
                sys.executable,
                str(REPO / "examples" / "webhook_receiver.py"),
                *("--port", str(self.port), "--db", str(self.inbox)),
                *("--secret", created.json()["secret"]),
            ],
            log_dir=self.log_dir,
            ready_url=f"http://127.0.0.1:{self.port}/",
        )

    def received(self) -> set[str]:
        if not self.inbox.exists():
            return set()
        with sqlite3.connect(self.inbox) as conn:
            return {row[0] for row in conn.execute("SELECT event_id FROM inbox")}

    def duplicates_ignored(self) -> int:
        return 0 if self.process is None else self.process.log().count("duplicate, ignored")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=10)


def _pending(database_url: str, tenant_id: uuid.UUID) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM webhook_deliveries WHERE tenant_id = %s AND status = 'pending'",
            (tenant_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def wait_delivered(database_url: str, tenant_id: uuid.UUID, deadline: float) -> bool:
    """Wait until no delivery of the tenant is pending (or `deadline`, wall clock)."""
    while _pending(database_url, tenant_id) and time.time() < deadline:
        time.sleep(0.2)
    return _pending(database_url, tenant_id) == 0


def check_events(
    database_url: str, tenant_id: uuid.UUID, consumer: Consumer
) -> tuple[list[str], dict[str, int]]:
    """The violations of the events' rules, and the counts for the report."""
    with psycopg.connect(database_url) as conn:
        operations = conn.execute(
            "SELECT o.id, o.state, o.operation_name, coalesce(p.status, r.status, m.status),"
            " p.capture_mode, p.amount_minor, p.amount_captured_minor,"
            " EXISTS (SELECT FROM payment_modifications v WHERE v.payment_id = p.id"
            "         AND v.type = 'void' AND v.status = 'SUCCEEDED')"
            " FROM operations o"
            " LEFT JOIN payments p ON p.operation_id = o.id"
            " LEFT JOIN refunds r ON r.operation_id = o.id"
            " LEFT JOIN payment_modifications m ON m.operation_id = o.id"
            " WHERE o.tenant_id = %s",
            (tenant_id,),
        ).fetchall()
        events = conn.execute(
            "SELECT id, operation_id, type FROM events WHERE tenant_id = %s", (tenant_id,)
        ).fetchall()
        deliveries = conn.execute(
            "SELECT status, count(*) FROM webhook_deliveries WHERE tenant_id = %s GROUP BY status",
            (tenant_id,),
        ).fetchall()
        attempts = conn.execute(
            "SELECT count(*) FROM webhook_attempts WHERE tenant_id = %s", (tenant_id,)
        ).fetchone()
    outcome_types = {*_OUTCOME_TYPES.values(), _AUTHORIZED}
    outcome_events: dict[uuid.UUID, list[str]] = {}
    expiries: dict[uuid.UUID, int] = {}
    for _, operation_id, kind in events:
        if kind in outcome_types:
            outcome_events.setdefault(operation_id, []).append(kind)
        elif kind == _EXPIRED:
            expiries[operation_id] = expiries.get(operation_id, 0) + 1
    violations: list[str] = []
    for operation_id, state, name, status, mode, amount, captured, voided in operations:
        found = outcome_events.get(operation_id, [])
        if state in ("COMPLETED", "FAILED"):
            if found != [_outcome_type(name, status, mode)]:
                violations.append(f"{operation_id} {state}/{status} has events {found}")
        elif found:
            violations.append(f"{operation_id} {state} is not final but has events {found}")
        lapsed = mode == "manual" and _lapsed(status, amount, captured, voided)
        if expiries.get(operation_id, 0) != int(lapsed):
            violations.append(
                f"{operation_id} {status} has {expiries.get(operation_id, 0)} {_EXPIRED} events"
            )
    received = consumer.received()
    never = [str(event_id) for event_id, _, _ in events if f"evt_{event_id.hex}" not in received]
    if never:
        violations.append(f"{len(never)} events never delivered, e.g. {never[:3]}")
    by_status = {str(status): int(n) for status, n in deliveries}
    if set(by_status) - {"succeeded"}:
        violations.append(f"deliveries not all succeeded: {by_status}")
    stats = {
        "events": len(events),
        "delivered": len(received),
        "deliveries_succeeded": by_status.get("succeeded", 0),
        "attempts": int(attempts[0]) if attempts else 0,
        "duplicates_ignored": consumer.duplicates_ignored(),
    }
    return violations, stats
