"""The ledger's SQLite schema, the statements that write it (`ledger.py` runs them), and
its rows read as the provider's models.

A refund's insert checks, in the same statement, that the charge's refunds never add up to
more than the charge.
"""

from __future__ import annotations

import sqlite3

from fake_provider.schemas import Charge, Refund

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    charge_id       TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL UNIQUE,
    amount_minor    INTEGER NOT NULL CHECK (amount_minor > 0),
    currency        TEXT NOT NULL,
    account_id      TEXT NOT NULL,
    reference       TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('succeeded', 'declined')),
    decline_code    TEXT,
    created_at      TEXT NOT NULL
)
"""

# A charge's refunds never add up to more than the charge: the insert below checks it in the
# same statement, under the ledger's lock.
REFUNDS_SCHEMA = """
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
REFUND_COLUMNS = "refund_id, charge_id, idempotency_key, amount_minor, status, created_at"
INSERT_REFUND = f"""
INSERT INTO refunds ({REFUND_COLUMNS})
SELECT :refund_id, :charge_id, :idempotency_key, :amount_minor, 'succeeded', :created_at
WHERE :amount_minor <= (
    SELECT c.amount_minor - coalesce((SELECT sum(r.amount_minor) FROM refunds r
                                      WHERE r.charge_id = c.charge_id), 0)
    FROM charges c WHERE c.charge_id = :charge_id AND c.status = 'succeeded')
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING {REFUND_COLUMNS}
"""

CHARGE_COLUMNS = (
    "charge_id, status, decline_code, idempotency_key, amount_minor, currency, account_id,"
    " reference, created_at"
)
INSERT_CHARGE = (
    f"INSERT INTO charges ({CHARGE_COLUMNS}) VALUES (:charge_id, :status, :decline_code,"
    " :idempotency_key, :amount_minor, :currency, :account_id, :reference, :created_at)"
    f" ON CONFLICT (idempotency_key) DO NOTHING RETURNING {CHARGE_COLUMNS}"
)
# A refund with its charge's currency, as the listings show it.
LISTED_REFUND = (
    "SELECT r.refund_id, r.charge_id, r.idempotency_key, r.amount_minor, c.currency, r.status,"
    " r.created_at FROM refunds r JOIN charges c ON c.charge_id = r.charge_id"
)


def charge_from_row(row: sqlite3.Row) -> Charge:
    return Charge.model_validate(dict(row))


def refund_from_row(row: sqlite3.Row) -> Refund:
    return Refund.model_validate(dict(row))
