"""The notifications outbox: the events to send and every attempt, in the ledger's file.

The tables are `ledger_schema.py`'s. A row is one copy of an event to send (a
`notify_duplicate` makes several), written by `add` in the transaction that makes the record
(`ledger_sql.insert_record`); `Outbox` is what the sender (`notify_sender.py`) and the admin
API read and write afterwards, through the ledger's connection and under its lock.

A charge's events are sent in the order they were made: a row is due only once no earlier
row of its charge is still `pending` (waiting for its time, being sent, or retried), so a
delay or a failing receiver holds back what follows it. A `held` row (`notify_reorder`)
holds back nothing, and becomes due when a later row of its charge has been sent. A failed
attempt is retried after 1, 2, 4 ... seconds, at most `MAX_BACKOFF_S`, until an answer 2xx
or until the next attempt would come later than the event's maximum age after it was made.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Literal

from fake_provider.notify_events import Event

MAX_BACKOFF_S = 60.0
# How long an event is retried, unless the settings say otherwise.
DEFAULT_MAX_AGE_S = 3600.0

OutboxState = Literal["pending", "held", "delivered", "failed", "dropped"]

_INSERT = """
INSERT INTO notification_outbox (event_id, copy, type, charge_id, idempotency_key, merchant,
    url, secret, body, created, fault, made_up, state, next_attempt_at)
VALUES (:event_id, :copy, :type, :charge_id, :idempotency_key, :merchant, :url, :secret,
    :body, :created, :fault, :made_up, :state, :next_attempt_at)
"""
# The first row of each charge still to send: what may go next.
_HEADS = """
SELECT o.seq, o.next_attempt_at FROM notification_outbox o
WHERE o.state = 'pending' AND NOT EXISTS (
    SELECT 1 FROM notification_outbox p
    WHERE p.charge_id = o.charge_id AND p.state = 'pending' AND p.seq < o.seq)
ORDER BY o.next_attempt_at, o.seq
LIMIT ?
"""


@dataclass(frozen=True)
class Destination:
    """Where a merchant's events go, and the secret they are signed with."""

    merchant: str
    url: str
    secret: str


@dataclass(frozen=True)
class Delivery:
    """One row to send: the event's body, where, and signed with what."""

    seq: int
    event_id: str
    url: str
    secret: str
    body: bytes


def add(
    conn: sqlite3.Connection,
    event: Event,
    destination: Destination,
    *,
    copies: int,
    made_at: float,
    state: OutboxState,
    next_attempt_at: float | None,
    fault: str | None,
    made_up: bool = False,
) -> list[int]:
    """Store `copies` rows to send `event`, made at `made_at` (unix seconds, the time its
    maximum age counts from), to `destination`; their seqs, in order. Call under the ledger's
    lock, in the transaction that makes the record."""
    params = {
        "event_id": event.id,
        "type": event.type,
        "charge_id": event.charge_id,
        "idempotency_key": event.idempotency_key,
        "merchant": destination.merchant,
        "url": destination.url,
        "secret": destination.secret,
        "body": event.body.decode(),
        "created": made_at,
        "fault": fault,
        "made_up": int(made_up),
        "state": state,
        "next_attempt_at": next_attempt_at,
    }
    seqs = []
    for copy in range(1, copies + 1):
        cursor = conn.execute(_INSERT, {**params, "copy": copy})
        assert cursor.lastrowid is not None
        seqs.append(cursor.lastrowid)
    return seqs


def backoff_s(attempts: int) -> float:
    """The wait before the next attempt after `attempts` failed ones: 1, 2, 4 ... 60 s."""
    return min(2.0 ** (attempts - 1), MAX_BACKOFF_S)


class Outbox:
    """The outbox through the ledger's connection, each call under the ledger's lock."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock) -> None:
        self._conn = conn
        self._lock = lock

    def heads(self, limit: int) -> list[tuple[int, float]]:
        """Up to `limit` rows that may be sent next (each the first of its charge still to
        send), soonest first, with the time each is due."""
        with self._lock:
            rows = self._conn.execute(_HEADS, (limit,)).fetchall()
        return [(int(row[0]), float(row[1])) for row in rows]

    def delivery(self, seq: int) -> Delivery | None:
        """Row `seq` as it is sent; None unless it is still to send."""
        with self._lock:
            row = self._conn.execute(
                "SELECT seq, event_id, url, secret, body FROM notification_outbox"
                " WHERE seq = ? AND state = 'pending'",
                (seq,),
            ).fetchone()
        if row is None:
            return None
        return Delivery(
            seq=row["seq"],
            event_id=row["event_id"],
            url=row["url"],
            secret=row["secret"],
            body=row["body"].encode(),
        )

    def attempted(
        self,
        seq: int,
        *,
        started_at: float,
        finished_at: float,
        status: int | None,
        error: str | None,
        early: bool,
        max_age_s: float,
    ) -> None:
        """Record an attempt to send row `seq` and what follows from it: delivered on a 2xx;
        else due again after its backoff, or failed past the event's maximum age. Rows of its
        charge held back by `notify_reorder` become due now that a later one was sent."""
        delivered = status is not None and 200 <= status < 300
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._attempted(
                    seq, started_at, finished_at, status, error, early, delivered, max_age_s
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _attempted(
        self,
        seq: int,
        started_at: float,
        finished_at: float,
        status: int | None,
        error: str | None,
        early: bool,
        delivered: bool,
        max_age_s: float,
    ) -> None:
        self._conn.execute(
            "INSERT INTO notification_attempts"
            " (outbox_seq, started_at, finished_at, status, error, early)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (seq, started_at, finished_at, status, error, int(early)),
        )
        row = self._conn.execute(
            "SELECT attempts, created, state, charge_id FROM notification_outbox WHERE seq = ?",
            (seq,),
        ).fetchone()
        attempts = row["attempts"] + 1
        if delivered:
            self._conn.execute(
                "UPDATE notification_outbox SET attempts = ?, state = 'delivered',"
                " next_attempt_at = NULL, finished_at = ?, reason = NULL WHERE seq = ?",
                (attempts, finished_at, seq),
            )
        elif row["state"] != "pending":
            # Given up on while this attempt was under way (its endpoint removed).
            self._conn.execute(
                "UPDATE notification_outbox SET attempts = ? WHERE seq = ?", (attempts, seq)
            )
        else:
            retry_at = finished_at + backoff_s(attempts)
            if retry_at - row["created"] > max_age_s:
                self._conn.execute(
                    "UPDATE notification_outbox SET attempts = ?, state = 'failed',"
                    " next_attempt_at = NULL, finished_at = ?, reason = ? WHERE seq = ?",
                    (attempts, finished_at, f"no 2xx answer within {max_age_s:g} s", seq),
                )
            else:
                self._conn.execute(
                    "UPDATE notification_outbox SET attempts = ?, next_attempt_at = ?"
                    " WHERE seq = ?",
                    (attempts, retry_at, seq),
                )
        self._conn.execute(
            "UPDATE notification_outbox SET state = 'pending', next_attempt_at = ?"
            " WHERE charge_id = ? AND state = 'held' AND seq < ?",
            (finished_at, row["charge_id"], seq),
        )

    def abandon(self, merchant: str, *, now: float, reason: str) -> int:
        """Give up every row of `merchant` still to send (pending or held); how many."""
        with self._lock:
            cursor = self._conn.execute(
                "UPDATE notification_outbox SET state = 'failed', next_attempt_at = NULL,"
                " finished_at = ?, reason = ? WHERE merchant = ? AND state IN ('pending', 'held')",
                (now, reason, merchant),
            )
        return cursor.rowcount

    def counts(self, merchant: str) -> dict[str, int]:
        """Of `merchant`'s rows: attempts made (`sent`), and rows `delivered`, still to send
        (`pending`, held ones included), `failed` and `dropped`."""
        counts = {"sent": 0, "delivered": 0, "pending": 0, "failed": 0, "dropped": 0}
        with self._lock:
            states = self._conn.execute(
                "SELECT state, count(*) FROM notification_outbox WHERE merchant = ? GROUP BY state",
                (merchant,),
            ).fetchall()
            sent = self._conn.execute(
                "SELECT count(*) FROM notification_attempts a"
                " JOIN notification_outbox o ON o.seq = a.outbox_seq WHERE o.merchant = ?",
                (merchant,),
            ).fetchone()[0]
        for state, count in states:
            counts["pending" if state == "held" else state] += count
        counts["sent"] = sent
        return counts

    def events(self, merchant: str | None) -> list[dict[str, Any]]:
        """Every event made (of `merchant`, if given), oldest first, each with its rows and
        their attempts, as `GET /_notifications/events` lists them."""
        where, params = ("", ()) if merchant is None else (" WHERE merchant = ?", (merchant,))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT * FROM notification_outbox{where} ORDER BY seq", params
            ).fetchall()
            attempts = self._conn.execute(
                "SELECT a.* FROM notification_attempts a"
                f" JOIN notification_outbox o ON o.seq = a.outbox_seq{where} ORDER BY a.seq",
                params,
            ).fetchall()
        by_row: dict[int, list[dict[str, Any]]] = {}
        for attempt in attempts:
            by_row.setdefault(attempt["outbox_seq"], []).append(
                {
                    "started_at": attempt["started_at"],
                    "finished_at": attempt["finished_at"],
                    "status": attempt["status"],
                    "error": attempt["error"],
                    "early": bool(attempt["early"]),
                }
            )
        events: dict[str, dict[str, Any]] = {}
        for row in rows:
            event = events.get(row["event_id"])
            if event is None:
                event = events[row["event_id"]] = _event_view(row)
            event["deliveries"].append(
                {
                    "copy": row["copy"],
                    "state": row["state"],
                    "attempts": by_row.get(row["seq"], []),
                    "next_attempt_at": row["next_attempt_at"],
                    "reason": row["reason"],
                }
            )
        return list(events.values())


def _event_view(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["event_id"],
        "type": row["type"],
        "charge_id": row["charge_id"],
        "idempotency_key": row["idempotency_key"],
        "merchant": row["merchant"],
        "url": row["url"],
        "created": int(row["created"]),
        "fault": row["fault"],
        "made_up": bool(row["made_up"]),
        "body": row["body"],
        "deliveries": [],
    }
