"""The provider's ledger: every charge and refund it made, in one SQLite file that outlives
the process.

A charge is committed before any answer leaves, so a crash of the process right after the commit
loses nothing: in WAL mode a commit is written to the WAL file before the statement returns, and
the OS keeps that write even if the process is killed the next instant. Commits are not fsynced
(`synchronous=NORMAL`): a power loss may lose the last ones, which is outside what this fake
provider promises. The unique idempotency key decides races: the insert either creates the row or
does nothing, and the caller then reads whichever row won.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fake_provider.schemas import Charge, ChargeRequest, ChargeStatus, Refund, RefundRequest

_SCHEMA = """
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
_REFUNDS_SCHEMA = """
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
_REFUND_COLUMNS = "refund_id, charge_id, idempotency_key, amount_minor, status, created_at"
_INSERT_REFUND = f"""
INSERT INTO refunds ({_REFUND_COLUMNS})
SELECT :refund_id, :charge_id, :idempotency_key, :amount_minor, 'succeeded', :created_at
WHERE :amount_minor <= (
    SELECT c.amount_minor - coalesce((SELECT sum(r.amount_minor) FROM refunds r
                                      WHERE r.charge_id = c.charge_id), 0)
    FROM charges c WHERE c.charge_id = :charge_id AND c.status = 'succeeded')
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING {_REFUND_COLUMNS}
"""

_COLUMNS = (
    "charge_id, status, decline_code, idempotency_key, amount_minor, currency, account_id,"
    " reference, created_at"
)


@dataclass(frozen=True)
class Recorded:
    """The charge stored under a key, and whether this call created it."""

    charge: Charge
    created: bool


@dataclass(frozen=True)
class RecordedRefund:
    """The refund stored under a key and whether this call created it; or, with `refund`
    None, why nothing was stored (the charge is unknown or has not that much left)."""

    refund: Refund | None
    created: bool
    refused: str | None = None


class Ledger:
    """Charges by idempotency key; safe to call from several threads."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._conn = connection
        # The app calls the ledger inline on its event loop, one statement at a time; the lock
        # keeps the class safe for threads too (sqlite3 connections are not safe for concurrent
        # use), and costs next to nothing uncontended.
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """Open (creating if needed) the ledger file at `path`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit: each statement is its own transaction, committed when it completes.
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: each commit is written to the WAL (so it survives the process
        # being killed: the write is in the OS's page cache) but not fsynced, which only a
        # power loss or an OS crash could undo. FULL's fsync per commit cost more than the
        # rest of a charge.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute(_SCHEMA)
        conn.execute(_REFUNDS_SCHEMA)
        return cls(conn)

    def close(self) -> None:
        """Close the file; the ledger is unusable afterwards."""
        with self._lock:
            self._conn.close()

    def record(
        self,
        key: str,
        request: ChargeRequest,
        *,
        status: ChargeStatus,
        decline_code: str | None,
    ) -> Recorded:
        """Create the charge for `key`, or return the one already stored under it.

        Never reads before inserting: the unique key makes the insert a no-op for every
        caller but the first, however many arrive at once.
        """
        params = {
            "charge_id": f"ch_{uuid.uuid4().hex}",
            "status": status,
            "decline_code": decline_code,
            "idempotency_key": key,
            "amount_minor": request.amount_minor,
            "currency": request.currency,
            "account_id": request.account_id,
            "reference": request.reference,
            "created_at": _now(),
        }
        with self._lock:
            inserted = self._conn.execute(
                f"INSERT INTO charges ({_COLUMNS}) VALUES (:charge_id, :status, :decline_code,"
                " :idempotency_key, :amount_minor, :currency, :account_id, :reference,"
                f" :created_at) ON CONFLICT (idempotency_key) DO NOTHING RETURNING {_COLUMNS}",
                params,
            ).fetchall()
            if inserted:
                return Recorded(_charge(inserted[0]), created=True)
            existing = self._find(key)
        if existing is None:
            # Rows are never deleted, so the row that won the insert must be there.
            raise RuntimeError(f"charge for key {key!r} vanished after a conflicting insert")
        return Recorded(existing, created=False)

    def find(self, key: str) -> Charge | None:
        """The charge stored under `key`, if any."""
        with self._lock:
            return self._find(key)

    def charges(self) -> list[Charge]:
        """Every charge, oldest first."""
        with self._lock:
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM charges ORDER BY seq").fetchall()
        return [_charge(row) for row in rows]

    def record_refund(self, key: str, request: RefundRequest) -> RecordedRefund:
        """Create the refund for `key` if the charge has that much left; or return the one
        already stored under the key; or say why nothing was stored."""
        params = {
            "refund_id": f"re_{uuid.uuid4().hex}",
            "charge_id": request.charge_id,
            "idempotency_key": key,
            "amount_minor": request.amount_minor,
            "created_at": _now(),
        }
        with self._lock:
            inserted = self._conn.execute(_INSERT_REFUND, params).fetchall()
            if inserted:
                return RecordedRefund(_refund(inserted[0]), created=True)
            existing = self._find_refund(key)
            if existing is not None:
                return RecordedRefund(existing, created=False)
            charge = self._charge_by_id(request.charge_id)
        if charge is None or charge.status != "succeeded":
            return RecordedRefund(None, False, f"no succeeded charge {request.charge_id}")
        return RecordedRefund(None, False, "the refund exceeds what is left of the charge")

    def find_refund(self, key: str) -> Refund | None:
        """The refund stored under `key`, if any."""
        with self._lock:
            return self._find_refund(key)

    def charge_by_id(self, charge_id: str) -> Charge | None:
        """The charge with this id, if any."""
        with self._lock:
            return self._charge_by_id(charge_id)

    def refunds(self) -> list[Refund]:
        """Every refund, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_REFUND_COLUMNS} FROM refunds ORDER BY seq"
            ).fetchall()
        return [_refund(row) for row in rows]

    def _find_refund(self, key: str) -> Refund | None:
        row = self._conn.execute(
            f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return None if row is None else _refund(row)

    def _charge_by_id(self, charge_id: str) -> Charge | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM charges WHERE charge_id = ?", (charge_id,)
        ).fetchone()
        return None if row is None else _charge(row)

    def _find(self, key: str) -> Charge | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM charges WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return None if row is None else _charge(row)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _refund(row: sqlite3.Row) -> Refund:
    return Refund.model_validate(dict(row))


def _charge(row: sqlite3.Row) -> Charge:
    return Charge.model_validate(dict(row))
