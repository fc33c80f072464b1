"""Provider notifications in the chaos run: the wiring, the wait, and the check.

Wiring: each fake provider tells the APIs of every record it makes (`notify_env`), signed
with a secret of the run's own that the APIs and workers hold
(`PAYMENTS_PROVIDER_EVENT_SECRETS`, `receiver_env`). A provider's endpoint is one API's
`/provider-events/<name>`; each restart of the provider (a crash fault) points the new
process at the next API, so that both receive in turn, and an API killed or paused under the
provider's attempts makes it retry with its backoff (events already made keep the endpoint
they were made for). With every provider notifying, recovery's checks of unknown operations
wait `notified_recheck_s` (PAYMENTS_NOTIFIED_RECHECK_S): the events settle most of them, and
polling is the safety net for the lost ones (`notify_drop`, a `notify_reorder` held for good).
The notification faults are armed by `chaos/notify_faults.py`.

After convergence (`wait_notified`) the run waits until the providers have nothing left to
send and our inbox nothing left to look at, then reads every event each provider made
(`GET /_notifications/events`: its outbox, with each copy's fate) and our inbox, and
`check_notifications` accounts for every event:

notification_kept         every event a provider had acknowledged (a copy answered 2xx) is in
                          our inbox, by (provider, event id), and nothing is in the inbox
                          that no provider made
notification_sent         no copy is left to send (`pending`) or given up (`failed`): only a
                          `notify_drop` is never sent, and a `notify_reorder` waits for good
                          when no later event of its charge came (both accounted for, their
                          operations settled by lookup like any other)
notification_accounted    every event kept is `applied`, or `parked` for a legitimate reason:
                          a made-up key no operation has (`notify_unknown_key`), or an event
                          whose operation was settled meanwhile by another path (its owner,
                          a check), applied at its next look. Never `received` at the end,
                          never `rejected` (every type the fake sends is a kind's), never a
                          made-up key applied to an operation
notification_agrees       no record of ours contradicts an event about it: the payment holding
                          a `charge.succeeded` is charged (SUCCEEDED or refunded), one holding
                          a `charge.authorized` held (what its captures, voids and expiry made
                          of it), one holding a `charge.declined` DECLINED; a succeeded or
                          authorized charge, a refund, a capture or a void the provider told
                          of is held by a row of ours, SUCCEEDED
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from chaos.checks import CHARGED, HELD, Violation

# Our final operation states.
_FINAL = frozenset({"COMPLETED", "FAILED"})
# The inbox's reason for an event whose key names no operation (app/provider_events/apply.py).
_NO_OPERATION = "no operation under its key"
# A provider's event type -> the statuses of the row of ours holding its record.
_AGREEING = {
    "charge.succeeded": CHARGED,
    "charge.authorized": HELD,
    "charge.declined": frozenset({"DECLINED"}),
    "refund.succeeded": frozenset({"SUCCEEDED"}),
    "capture.succeeded": frozenset({"SUCCEEDED"}),
    "void.succeeded": frozenset({"SUCCEEDED"}),
}
# The record id each event's object names its record by, by the event type's first part.
_RECORD_ID = {
    "charge": "charge_id",
    "refund": "refund_id",
    "capture": "capture_id",
    "void": "void_id",
}


def new_secret() -> str:
    """A notification secret, as both the fake provider and the service take one."""
    return "whsec_" + secrets.token_urlsafe(32)


def receiver_env(secrets_by_provider: Mapping[str, str], recheck_s: float) -> dict[str, str]:
    """The APIs' and workers' settings: each provider's secret, and recovery's wait."""
    return {
        "PAYMENTS_PROVIDER_EVENT_SECRETS": json.dumps(
            {name: [secret] for name, secret in secrets_by_provider.items()}
        ),
        "PAYMENTS_NOTIFIED_RECHECK_S": str(recheck_s),
    }


def notify_env(api_url: str, provider: str, secret: str) -> dict[str, str]:
    """A fake provider's settings: notify `api_url`'s endpoint for `provider`, signed with
    `secret` (the development merchant's, whose key the APIs and workers send)."""
    return {
        "PAYMENTS_FAKE_PROVIDER_NOTIFY_URL": f"{api_url}/provider-events/{provider}",
        "PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET": secret,
    }


# -- the wait ----------------------------------------------------------------------------


def _to_send(ledgers: Iterable[Path]) -> int:
    """Copies the providers still have to send (`pending`; a held one waits for good), read
    from their ledgers' files: cheap enough to ask twice a second."""
    total = 0
    for ledger in ledgers:
        if not ledger.exists():
            continue
        with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=5)) as conn:
            total += conn.execute(
                "SELECT count(*) FROM notification_outbox WHERE state = 'pending'"
            ).fetchone()[0]
    return total


def _to_apply(database_url: str) -> dict[str, int]:
    """Events our inbox has yet to apply (never looked at, or parked for an operation not
    final yet), by state, reason and their operation's state."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT e.state, e.reason, o.state, count(*) FROM provider_events e"
            " LEFT JOIN operations o ON o.id = e.operation_id"
            " WHERE e.state = 'received'"
            "    OR (e.state = 'parked' AND e.operation_id IS NOT NULL"
            "        AND o.state NOT IN ('COMPLETED', 'FAILED'))"
            " GROUP BY 1, 2, 3"
        ).fetchall()
    return {f"{state}: {reason} ({operation})": int(n) for state, reason, operation, n in rows}


def wait_notified(
    database_url: str, ledgers: Iterable[Path], deadline: float
) -> tuple[bool, dict[str, int]]:
    """Wait until nothing is left to send or to apply (or `deadline`, wall clock): whether
    nothing is, and the most of each thing it waited for (copies `to send`, events by state,
    reason and operation state)."""
    paths = list(ledgers)
    waited: dict[str, int] = {}
    while True:
        pending = {"to send": _to_send(paths), **_to_apply(database_url)}
        for what, count in pending.items():
            waited[what] = max(waited.get(what, 0), count)
        if not any(pending.values()):
            return True, {what: n for what, n in waited.items() if n}
        if time.time() >= deadline:
            return False, {what: n for what, n in waited.items() if n}
        time.sleep(0.5)


# -- what the check reads ----------------------------------------------------------------


@dataclass(frozen=True)
class NotifiedBooks:
    """What the check compares: every event the providers made (each tagged with its
    `provider`, as `GET /_notifications/events` lists it), our inbox's rows, and our rows
    that hold the providers' records."""

    sent: list[dict[str, Any]]
    inbox: list[dict[str, Any]]
    # Our operations' states, by id.
    operations: dict[uuid.UUID, str] = field(default_factory=dict)
    # The status of the row of ours holding each provider record, by record id (a charge's,
    # refund's, capture's or void's).
    held: dict[str, str] = field(default_factory=dict)


def read_books(database_url: str, providers: Mapping[str, str]) -> NotifiedBooks:
    """Every provider's events and our inbox and rows, once the run has settled."""
    sent: list[dict[str, Any]] = []
    for name, url in providers.items():
        response = httpx.get(f"{url}/_notifications/events", timeout=120)
        response.raise_for_status()
        sent += [{**event, "provider": name} for event in response.json()["events"]]
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        inbox = conn.execute(
            "SELECT provider, event_id, type, provider_key, state, reason, operation_id,"
            " attempts FROM provider_events"
        ).fetchall()
        operations = conn.execute("SELECT id, state FROM operations").fetchall()
        held = conn.execute(
            "SELECT provider_charge_id AS record, status FROM payments"
            " WHERE provider_charge_id IS NOT NULL"
            " UNION ALL SELECT provider_refund_id, status FROM refunds"
            " WHERE provider_refund_id IS NOT NULL"
            " UNION ALL SELECT provider_reference, status FROM payment_modifications"
            " WHERE provider_reference IS NOT NULL"
        ).fetchall()
    return NotifiedBooks(
        sent=sent,
        inbox=[dict(row) for row in inbox],
        operations={row["id"]: str(row["state"]) for row in operations},
        held={str(row["record"]): str(row["status"]) for row in held},
    )


# -- the check ---------------------------------------------------------------------------


def _fate(event: Mapping[str, Any]) -> str:
    """What became of an event: `delivered` (a copy answered 2xx), else what its copies
    are: `pending` or `failed` (one still to send, or given up), `held` or `dropped`."""
    states = {delivery["state"] for delivery in event["deliveries"]}
    for state in ("delivered", "pending", "failed", "held", "dropped"):
        if state in states:
            return state
    return "none"


def _unsent(event: Mapping[str, Any]) -> str | None:
    """Why a copy of the event is not sent, when no fault explains it (None: none)."""
    for delivery in event["deliveries"]:
        state = delivery["state"]
        if state in ("pending", "failed"):
            return f"copy {delivery['copy']} {state} at the end ({delivery.get('reason')})"
        if state == "held" and event["fault"] != "notify_reorder":
            return f"copy {delivery['copy']} held without a notify_reorder"
        if state == "dropped" and event["fault"] != "notify_drop":
            return f"copy {delivery['copy']} dropped without a notify_drop"
    return None


def _parked_legitimately(
    row: Mapping[str, Any], made_up: bool, operations: Mapping[uuid.UUID, str]
) -> str | None:
    """Why a parked event is accounted for (None: it is not)."""
    reason = str(row.get("reason") or "")
    if made_up and row.get("operation_id") is None and reason.startswith(_NO_OPERATION):
        return "a key no operation has"
    operation_id = row.get("operation_id")
    if not made_up and operation_id is not None and operations.get(operation_id, "") in _FINAL:
        return "its operation settled meanwhile"
    return None


def _agrees(event: Mapping[str, Any], held: Mapping[str, str]) -> str | None:
    """What contradicts the event in our rows (None: nothing)."""
    kind = str(event["type"])
    agreeing = _AGREEING.get(kind)
    if agreeing is None:
        return None
    obj = json.loads(event["body"])["data"]["object"]
    record = str(obj.get(_RECORD_ID[kind.split(".", 1)[0]]))
    status = held.get(record)
    if status is None:
        if kind == "charge.declined":
            # A decline a payment failed over from holds nothing of ours: the payment moved
            # to its next attempt, whose charge it holds.
            return None
        return f"{kind} of {record}: no row of ours holds it"
    if status not in agreeing:
        return f"{kind} of {record}: our row says {status}"
    return None


def check_notifications(books: NotifiedBooks) -> tuple[list[Violation], dict[str, Any]]:
    """The violations of the notifications' promises (above), and the counts for the report."""
    violations: list[Violation] = []
    kept = {(row["provider"], row["event_id"]): row for row in books.inbox}
    made = {(event["provider"], event["id"]) for event in books.sent}
    fates: Counter[str] = Counter()
    inbox_states: Counter[str] = Counter()
    accounted: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    attempts = failed_attempts = early_attempts = agreed = 0
    for event in books.sent:
        name = f"{event['provider']}:{event['id']}"
        fate = _fate(event)
        fates[fate] += 1
        faults[event["fault"] or "none"] += 1
        for delivery in event["deliveries"]:
            for attempt in delivery["attempts"]:
                attempts += 1
                early_attempts += bool(attempt["early"])
                status = attempt["status"]
                failed_attempts += status is None or not 200 <= int(status) < 300
        row = kept.get((event["provider"], event["id"]))
        if fate == "delivered" and row is None:
            violations.append(
                Violation("notification_kept", name, f"{event['type']} acknowledged, not kept")
            )
        unsent = _unsent(event)
        if unsent is not None:
            violations.append(Violation("notification_sent", name, f"{event['type']}: {unsent}"))
        if not event["made_up"]:
            contradiction = _agrees(event, books.held)
            if contradiction is None:
                agreed += 1
            else:
                violations.append(Violation("notification_agrees", name, contradiction))
        if row is None:
            continue
        state = str(row["state"])
        inbox_states[state] += 1
        if state == "applied" and event["made_up"]:
            violations.append(
                Violation("notification_accounted", name, "a made-up key applied to an operation")
            )
        elif state == "parked":
            why = _parked_legitimately(row, bool(event["made_up"]), books.operations)
            if why is None:
                violations.append(
                    Violation("notification_accounted", name, f"parked: {row.get('reason')}")
                )
            else:
                accounted[f"parked: {why}"] += 1
        elif state in ("received", "rejected"):
            violations.append(
                Violation("notification_accounted", name, f"{state}: {row.get('reason')}")
            )
    for provider, event_id in sorted(set(kept) - made):
        violations.append(
            Violation("notification_kept", f"{provider}:{event_id}", "kept, never made")
        )
    for event in books.sent:
        if _fate(event) == "dropped":
            accounted["dropped (notify_drop)"] += 1
        elif _fate(event) == "held":
            accounted["held for good (notify_reorder, no later event)"] += 1
    stats: dict[str, Any] = {
        "made": len(books.sent),
        "made_up": sum(1 for event in books.sent if event["made_up"]),
        "by_fault": dict(sorted(faults.items())),
        "fates": dict(sorted(fates.items())),
        "attempts": attempts,
        "attempts_failed": failed_attempts,
        "attempts_early": early_attempts,
        "inbox": dict(sorted(inbox_states.items())),
        "accounted": dict(sorted(accounted.items())),
        "agreed": agreed,
    }
    return violations, stats


def summary_lines(entry: Mapping[str, Any]) -> list[str]:
    """The notifications in the run's summary."""
    if not entry:
        return []
    if entry.get("skipped"):
        return [f"  notifications        {entry['skipped']}"]
    return [
        f"  notifications        {entry['made']} events made ({entry['made_up']} made up), "
        f"{entry['attempts']} attempts ({entry['attempts_failed']} failed, "
        f"{entry['attempts_early']} before the answer); settled in "
        f"{entry.get('settled_s', '-')} s, waiting for {entry.get('waited_for') or 'nothing'}",
        f"    by fault           {entry['by_fault']}",
        f"    at the provider    {entry['fates']}",
        f"    in our inbox       {entry['inbox']}",
        f"    accounted for      {entry['accounted'] or 'nothing else'}",
        f"    agreeing records   {entry['agreed']}",
    ]
