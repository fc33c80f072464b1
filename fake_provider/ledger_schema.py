"""The ledger's SQLite schema, and the upgrade in place of a file an older provider wrote.

`PRAGMA user_version` numbers the schema a file holds: 0 for a ledger from before two-step
payments (a charge succeeded or was declined; no captures, no voids), 1 for one from before
notifications (no outbox), `VERSION` since. `prepare` brings any file to `VERSION` in one
transaction when the ledger opens, so a provider started on an old ledger serves every charge
and refund it holds, as automatic charges, and takes authorizations, captures and voids
beside them, and notifies of what it makes from then on. A file from a newer provider is
refused rather than written.

SQLite cannot change a table's CHECK constraint, and a charge's status may now be
`authorized`: the charges table of an old file is rebuilt (a new table, every row copied
with its `seq`, the old one dropped, the new one renamed), the procedure SQLite documents
for a change `ALTER TABLE` cannot make.
"""

from __future__ import annotations

import sqlite3

VERSION = 2

# `capture`: what the charge's request asked for. An automatic charge is `succeeded` or
# `declined`; a manual one `authorized` or `declined`. What became of an authorization later
# (its captures, its void) is in those tables, never in its status.
_CHARGES = """
CREATE TABLE {table} (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    charge_id       TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL UNIQUE,
    amount_minor    INTEGER NOT NULL CHECK (amount_minor > 0),
    currency        TEXT NOT NULL,
    account_id      TEXT NOT NULL,
    reference       TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('succeeded', 'declined', 'authorized')),
    decline_code    TEXT,
    created_at      TEXT NOT NULL,
    capture         TEXT NOT NULL DEFAULT 'automatic'
                    CHECK (capture IN ('automatic', 'manual'))
)
"""
# The columns a charge had before `capture`, which an upgrade copies.
_OLD_CHARGE_COLUMNS = (
    "seq, charge_id, idempotency_key, amount_minor, currency, account_id, reference, status,"
    " decline_code, created_at"
)

# A charge's refunds never add up to more than it has to give back: the insert
# (`ledger_sql.INSERT_REFUND`) checks it in the same statement, under the ledger's lock.
_REFUNDS = """
CREATE TABLE IF NOT EXISTS refunds (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    refund_id       TEXT NOT NULL UNIQUE,
    charge_id       TEXT NOT NULL REFERENCES charges (charge_id),
    idempotency_key TEXT NOT NULL UNIQUE,
    amount_minor    INTEGER NOT NULL CHECK (amount_minor > 0),
    status          TEXT NOT NULL CHECK (status = 'succeeded'),
    created_at      TEXT NOT NULL
)
"""

# The captures of an authorization never add up to more than it, and none follows its void:
# the insert (`ledger_sql.INSERT_CAPTURE`) checks both in the same statement. `currency` is
# the charge's, as the capture was made.
_CAPTURES = """
CREATE TABLE IF NOT EXISTS captures (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    capture_id      TEXT NOT NULL UNIQUE,
    charge_id       TEXT NOT NULL REFERENCES charges (charge_id),
    idempotency_key TEXT NOT NULL UNIQUE,
    amount_minor    INTEGER NOT NULL CHECK (amount_minor > 0),
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status = 'succeeded'),
    created_at      TEXT NOT NULL
)
"""

# At most one void per authorization, releasing what was left to capture (`INSERT_VOID`).
_VOIDS = """
CREATE TABLE IF NOT EXISTS voids (
    seq                   INTEGER PRIMARY KEY AUTOINCREMENT,
    void_id               TEXT NOT NULL UNIQUE,
    charge_id             TEXT NOT NULL REFERENCES charges (charge_id),
    idempotency_key       TEXT NOT NULL UNIQUE,
    amount_released_minor INTEGER NOT NULL CHECK (amount_released_minor > 0),
    currency              TEXT NOT NULL,
    status                TEXT NOT NULL CHECK (status = 'succeeded'),
    created_at            TEXT NOT NULL
)
"""

# The notifications outbox (`notify_outbox.py`): one row per copy of an event to send, written
# in the transaction that makes the record the event tells of, so no record is made without
# its event and none survives a crash without it. A row keeps where it goes and the secret it
# is signed with, as they were when the event was made: it is delivered after a restart
# whatever the provider is configured with then. `charge_id` orders a charge's events;
# `state`: `pending` (to send, at `next_attempt_at`), `held` (a `notify_reorder`: until a
# later event of its charge is sent), `delivered` (answered 2xx), `failed` (given up:
# `reason`), `dropped` (a `notify_drop`: never sent).
_NOTIFICATION_OUTBOX = """
CREATE TABLE IF NOT EXISTS notification_outbox (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL,
    copy            INTEGER NOT NULL CHECK (copy >= 1),
    type            TEXT NOT NULL,
    charge_id       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    merchant        TEXT NOT NULL,
    url             TEXT NOT NULL,
    secret          TEXT NOT NULL,
    body            TEXT NOT NULL,
    created         REAL NOT NULL,
    fault           TEXT,
    made_up         INTEGER NOT NULL DEFAULT 0,
    state           TEXT NOT NULL
                    CHECK (state IN ('pending', 'held', 'delivered', 'failed', 'dropped')),
    next_attempt_at REAL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    finished_at     REAL,
    reason          TEXT,
    UNIQUE (event_id, copy)
)
"""
# Every attempt to send a row of the outbox: when, and what came back (`status` an HTTP
# status, or `error` when there was none); `early`: sent before the answer of the call that
# made the record (`notify_early`).
_NOTIFICATION_ATTEMPTS = """
CREATE TABLE IF NOT EXISTS notification_attempts (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_seq  INTEGER NOT NULL REFERENCES notification_outbox (seq),
    started_at  REAL NOT NULL,
    finished_at REAL NOT NULL,
    status      INTEGER,
    error       TEXT,
    early       INTEGER NOT NULL
)
"""
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS captures_by_charge ON captures (charge_id)",
    "CREATE INDEX IF NOT EXISTS voids_by_charge ON voids (charge_id)",
    # What is left to send, by when, and by charge (the order a charge's events keep).
    "CREATE INDEX IF NOT EXISTS notifications_due ON notification_outbox (next_attempt_at)"
    " WHERE state = 'pending'",
    "CREATE INDEX IF NOT EXISTS notifications_by_charge ON notification_outbox"
    " (charge_id, seq) WHERE state = 'pending'",
    "CREATE INDEX IF NOT EXISTS notifications_held ON notification_outbox (charge_id)"
    " WHERE state = 'held'",
    "CREATE INDEX IF NOT EXISTS notification_attempts_by_row ON notification_attempts (outbox_seq)",
)


class LedgerVersionError(RuntimeError):
    """The ledger file was written by a newer provider, whose schema this one does not know."""


def prepare(conn: sqlite3.Connection) -> None:
    """Create the tables of a new file, or upgrade an older file's in place; one transaction.

    `conn` is in autocommit mode (`isolation_level=None`), as the ledger opens it.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > VERSION:
            raise LedgerVersionError(
                f"the ledger's schema is version {version}; this provider knows up to {VERSION}"
            )
        if version < 1:
            if _has_table(conn, "charges"):
                _upgrade_charges(conn)
            else:
                conn.execute(_CHARGES.format(table="charges"))
        # Version 2 only adds tables: a version-1 file gets them as a new one does.
        tables = (_REFUNDS, _CAPTURES, _VOIDS, _NOTIFICATION_OUTBOX, _NOTIFICATION_ATTEMPTS)
        for statement in (*tables, *_INDEXES):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def _upgrade_charges(conn: sqlite3.Connection) -> None:
    """Rebuild a version-0 charges table with the new columns and checks; every charge kept,
    as an automatic one, under its `seq`."""
    conn.execute(_CHARGES.format(table="charges_upgraded"))
    conn.execute(
        f"INSERT INTO charges_upgraded ({_OLD_CHARGE_COLUMNS}, capture)"
        f" SELECT {_OLD_CHARGE_COLUMNS}, 'automatic' FROM charges ORDER BY seq"
    )
    conn.execute("DROP TABLE charges")
    conn.execute("ALTER TABLE charges_upgraded RENAME TO charges")
