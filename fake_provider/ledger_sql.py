"""The statements that write the ledger (`ledger.py` and `ledger_two_step.py` run them; the
tables are `ledger_schema.py`'s), and its rows read as the provider's models.

Each insert that could overdraw a charge checks, in the same statement, what the charge has
left: a refund never gives back more than was taken (the amount of a succeeded charge, the
captures of an authorization) less its refunds; a capture never takes more than the
authorization less its captures, nor follows its void; a void releases what was left to
capture, once, and only while something was.

Every record is made by one insert (`insert_record`); for a merchant with a notification
endpoint, its event is stored in the same transaction (`notifications.Announcer`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from fake_provider.schemas import Capture, Charge, Refund, Void
from fake_provider.timeline import Key

if TYPE_CHECKING:
    from fake_provider.notifications import Announcer

_Made = TypeVar("_Made", Charge, Refund, Capture, Void)

# What an authorization's captures add up to; `c` is the charge.
_CAPTURED = (
    "coalesce((SELECT sum(k.amount_minor) FROM captures k WHERE k.charge_id = c.charge_id), 0)"
)
_REFUNDED = (
    "coalesce((SELECT sum(r.amount_minor) FROM refunds r WHERE r.charge_id = c.charge_id), 0)"
)
_NOT_VOIDED = "NOT EXISTS (SELECT 1 FROM voids v WHERE v.charge_id = c.charge_id)"

REFUND_COLUMNS = "refund_id, charge_id, idempotency_key, amount_minor, status, created_at"
INSERT_REFUND = f"""
INSERT INTO refunds ({REFUND_COLUMNS})
SELECT :refund_id, :charge_id, :idempotency_key, :amount_minor, 'succeeded', :created_at
WHERE :amount_minor <= (
    SELECT CASE c.status WHEN 'succeeded' THEN c.amount_minor ELSE {_CAPTURED} END
           - {_REFUNDED}
    FROM charges c WHERE c.charge_id = :charge_id AND c.status IN ('succeeded', 'authorized'))
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING {REFUND_COLUMNS}
"""

CHARGE_COLUMNS = (
    "charge_id, status, decline_code, idempotency_key, amount_minor, currency, account_id,"
    " reference, created_at, capture"
)
INSERT_CHARGE = (
    f"INSERT INTO charges ({CHARGE_COLUMNS}) VALUES (:charge_id, :status, :decline_code,"
    " :idempotency_key, :amount_minor, :currency, :account_id, :reference, :created_at,"
    " :capture)"
    f" ON CONFLICT (idempotency_key) DO NOTHING RETURNING {CHARGE_COLUMNS}"
)
# A refund with its charge's currency, as the listings show it.
LISTED_REFUND = (
    "SELECT r.refund_id, r.charge_id, r.idempotency_key, r.amount_minor, c.currency, r.status,"
    " r.created_at FROM refunds r JOIN charges c ON c.charge_id = r.charge_id"
)

CAPTURE_COLUMNS = (
    "capture_id, charge_id, idempotency_key, amount_minor, currency, status, created_at"
)
INSERT_CAPTURE = f"""
INSERT INTO captures ({CAPTURE_COLUMNS})
SELECT :capture_id, c.charge_id, :idempotency_key, :amount_minor, c.currency, 'succeeded',
       :created_at
FROM charges c
WHERE c.charge_id = :charge_id AND c.status = 'authorized' AND {_NOT_VOIDED}
  AND :amount_minor <= c.amount_minor - {_CAPTURED}
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING {CAPTURE_COLUMNS}
"""

VOID_COLUMNS = (
    "void_id, charge_id, idempotency_key, amount_released_minor, currency, status, created_at"
)
INSERT_VOID = f"""
INSERT INTO voids ({VOID_COLUMNS})
SELECT :void_id, c.charge_id, :idempotency_key, c.amount_minor - {_CAPTURED}, c.currency,
       'succeeded', :created_at
FROM charges c
WHERE c.charge_id = :charge_id AND c.status = 'authorized' AND {_NOT_VOIDED}
  AND c.amount_minor > {_CAPTURED}
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING {VOID_COLUMNS}
"""

# Ids fetched per statement: under SQLite's oldest limit on a statement's parameters (999).
_CHUNK = 500


def insert_record(
    conn: sqlite3.Connection,
    statement: str,
    params: Mapping[str, object],
    read: Callable[[sqlite3.Row], _Made],
    notify: Announcer | None,
) -> _Made | None:
    """Run `statement`, an insert returning the row it makes (none if it makes none), and
    read that row with `read`; under the ledger's lock.

    Without `notify`, the insert is the one statement, committed as it completes. With it,
    the insert and the event `notify` stores of the new record are one transaction.
    """
    if notify is None:
        rows = conn.execute(statement, params).fetchall()
        return read(rows[0]) if rows else None
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = conn.execute(statement, params).fetchall()
        made = read(rows[0]) if rows else None
        if made is not None:
            notify.announce(conn, made)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return made


def refund_from_row(row: sqlite3.Row) -> Refund:
    return Refund.model_validate(dict(row))


def capture_from_row(row: sqlite3.Row) -> Capture:
    return Capture.model_validate(dict(row))


def void_from_row(row: sqlite3.Row) -> Void:
    return Void.model_validate(dict(row))


def rows_by_id(
    conn: sqlite3.Connection, select: str, column: str, ids: list[str]
) -> dict[str, sqlite3.Row]:
    """The rows `select` reads whose `column` is one of `ids`, by that id (the first column)."""
    rows: dict[str, sqlite3.Row] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        for row in conn.execute(f"{select} WHERE {column} IN ({marks})", chunk):
            rows[row[0]] = row
    return rows


def timeline_key(conn: sqlite3.Connection, table: str, column: str, record_id: str) -> Key | None:
    """Where the record `record_id` of `table` (its id in `column`) sits in its timeline;
    None if there is no such record."""
    row = conn.execute(
        f"SELECT created_at FROM {table} WHERE {column} = ?", (record_id,)
    ).fetchone()
    return None if row is None else (row[0], record_id)
