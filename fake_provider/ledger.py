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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from fake_provider.schemas import (
    Charge,
    ChargeRequest,
    ChargeStatus,
    LedgerChargeChange,
    LedgerChargeRequest,
    LedgerRefundChange,
    ListedCharge,
    ListedChargeStatus,
    ListedRefund,
    Refund,
    RefundRequest,
)
from fake_provider.timeline import Key, Timeline, utc_timestamp

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
# A refund with its charge's currency, as the listings show it.
_LISTED_REFUND = (
    "SELECT r.refund_id, r.charge_id, r.idempotency_key, r.amount_minor, c.currency, r.status,"
    " r.created_at FROM refunds r JOIN charges c ON c.charge_id = r.charge_id"
)
# The members of a ledger edit that are not columns to overwrite: the time as given (the
# ledger writes its own form) and the id naming the record in a change of many.
_NOT_COLUMNS = {"created_at", "charge_id", "refund_id"}
# Ids fetched per statement: under SQLite's oldest limit on a statement's parameters (999).
_CHUNK = 500


@dataclass(frozen=True)
class Recorded:
    """The charge stored under a key, and whether this call created it."""

    charge: Charge
    created: bool


_Change = TypeVar("_Change", bound=BaseModel)
_Record = TypeVar("_Record", Charge, Refund)
# One record's change in an edit of the ledger: its id, the change, and `created_at` as the
# ledger writes it (None: unchanged).
Edit = tuple[str, _Change, str | None]


class LedgerEditError(ValueError):
    """An edit of the ledger (`/_ledger`) that cannot be made; nothing changed."""


class UnknownRecord(LedgerEditError):
    """No charge or refund has this id."""


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
        # In memory, read once here and kept in step by every write below (this process is
        # the ledger's only writer): the records in creation order, for the listings and the
        # settlement reports, and what each refunded charge has given back.
        self._charge_times = Timeline(
            (row[0], row[1])
            for row in connection.execute("SELECT created_at, charge_id FROM charges")
        )
        self._refund_times = Timeline(
            (row[0], row[1])
            for row in connection.execute("SELECT created_at, refund_id FROM refunds")
        )
        self._refunded: dict[str, int] = {
            row[0]: row[1]
            for row in connection.execute(
                "SELECT charge_id, sum(amount_minor) FROM refunds GROUP BY charge_id"
            )
        }

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
                charge = _charge(inserted[0])
                self._charge_times.add(charge.created_at, charge.charge_id)
                return Recorded(charge, created=True)
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
                refund = _refund(inserted[0])
                self._refund_times.add(refund.created_at, refund.refund_id)
                self._refunded[refund.charge_id] = (
                    self._refunded.get(refund.charge_id, 0) + refund.amount_minor
                )
                return RecordedRefund(refund, created=True)
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

    # The listings and the settlement reports: records by creation time, in (created_at, id)
    # order, found through the timelines and read by id.

    def charge_page(
        self, *, gte: str | None, lt: str | None, after: str | None, limit: int | None
    ) -> tuple[list[ListedCharge], bool]:
        """Charges created in [gte, lt), after the charge `after`, up to `limit`; and
        whether more follow. UnknownRecord if `after` names no charge."""
        with self._lock:
            cursor = None if after is None else self._charge_key(after)
            found = self._charge_times.window(gte=gte, lt=lt, after=cursor, limit=limit)
            rows = self._rows_by_id(f"SELECT {_COLUMNS} FROM charges", "charge_id", found.ids)
            return [self._listed_charge(rows[i]) for i in found.ids], found.has_more

    def refund_page(
        self, *, gte: str | None, lt: str | None, after: str | None, limit: int | None
    ) -> tuple[list[ListedRefund], bool]:
        """Refunds created in [gte, lt), after the refund `after`, up to `limit`; and
        whether more follow. UnknownRecord if `after` names no refund."""
        with self._lock:
            cursor = None if after is None else self._refund_key(after)
            found = self._refund_times.window(gte=gte, lt=lt, after=cursor, limit=limit)
            rows = self._rows_by_id(_LISTED_REFUND, "r.refund_id", found.ids)
            return [ListedRefund.model_validate(dict(rows[i])) for i in found.ids], found.has_more

    def _charge_key(self, charge_id: str) -> Key:
        row = self._conn.execute(
            "SELECT created_at FROM charges WHERE charge_id = ?", (charge_id,)
        ).fetchone()
        if row is None:
            raise UnknownRecord(f"no charge {charge_id}")
        return (row[0], charge_id)

    def _refund_key(self, refund_id: str) -> Key:
        row = self._conn.execute(
            "SELECT created_at FROM refunds WHERE refund_id = ?", (refund_id,)
        ).fetchone()
        if row is None:
            raise UnknownRecord(f"no refund {refund_id}")
        return (row[0], refund_id)

    def _rows_by_id(self, select: str, column: str, ids: list[str]) -> dict[str, sqlite3.Row]:
        rows: dict[str, sqlite3.Row] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            for row in self._conn.execute(f"{select} WHERE {column} IN ({marks})", chunk):
                rows[row[0]] = row
        return rows

    def _listed_charge(self, row: sqlite3.Row) -> ListedCharge:
        refunded = self._refunded.get(row["charge_id"], 0)
        status: ListedChargeStatus = row["status"]
        if status == "succeeded" and refunded > 0:
            status = "refunded" if refunded >= row["amount_minor"] else "partially_refunded"
        return ListedCharge.model_validate(
            {**dict(row), "status": status, "amount_refunded_minor": refunded}
        )

    # Edits for tests (`/_ledger`, admin API only): the ledger as a provider's books might
    # disagree with the service's. No rule beyond the columns' own is checked: an edited
    # charge may have refunds worth more than it, or a declined one refunds.

    def add_charge(self, request: LedgerChargeRequest, created_at: str | None) -> Charge:
        """Store a charge no request made, under `request.idempotency_key`;
        LedgerEditError if a charge has that key."""
        params = {
            "charge_id": f"ch_{uuid.uuid4().hex}",
            "status": request.status,
            "decline_code": "card_declined" if request.status == "declined" else None,
            "idempotency_key": request.idempotency_key,
            "amount_minor": request.amount_minor,
            "currency": request.currency,
            "account_id": request.account_id,
            "reference": request.reference,
            "created_at": created_at or _now(),
        }
        with self._lock:
            inserted = self._conn.execute(
                f"INSERT INTO charges ({_COLUMNS}) VALUES (:charge_id, :status, :decline_code,"
                " :idempotency_key, :amount_minor, :currency, :account_id, :reference,"
                f" :created_at) ON CONFLICT (idempotency_key) DO NOTHING RETURNING {_COLUMNS}",
                params,
            ).fetchall()
            if not inserted:
                raise LedgerEditError(f"a charge has the key {request.idempotency_key!r}")
            charge = _charge(inserted[0])
            self._charge_times.add(charge.created_at, charge.charge_id)
        return charge

    def change_charge(
        self, charge_id: str, change: LedgerChargeChange, created_at: str | None
    ) -> Charge:
        """Overwrite the members `change` sets; UnknownRecord if there is no such charge."""
        return self.change_charges([(charge_id, change, created_at)])[0]

    def change_charges(self, edits: Sequence[Edit[LedgerChargeChange]]) -> list[Charge]:
        """Overwrite the members each change sets, every charge in one transaction: all of
        them, or none (UnknownRecord naming the first charge there is not)."""
        rows = [(charge_id, _values(change, created_at)) for charge_id, change, created_at in edits]
        with self._lock:
            changed = self._overwrite_all("charges", "charge_id", rows, self._charge_by_id)
            for before, after in changed:
                self._charge_times.remove(before.created_at, before.charge_id)
                self._charge_times.add(after.created_at, after.charge_id)
        return [after for _, after in changed]

    def drop_charge(self, charge_id: str) -> None:
        """Forget a charge; UnknownRecord if there is none, LedgerEditError if it has
        refunds (drop them first: every refund keeps its charge)."""
        with self._lock:
            before = self._charge_by_id(charge_id)
            if before is None:
                raise UnknownRecord(f"no charge {charge_id}")
            if charge_id in self._refunded:
                raise LedgerEditError(f"charge {charge_id} has refunds; drop them first")
            self._conn.execute("DELETE FROM charges WHERE charge_id = ?", (charge_id,))
            self._charge_times.remove(before.created_at, charge_id)

    def change_refund(
        self, refund_id: str, change: LedgerRefundChange, created_at: str | None
    ) -> Refund:
        """Overwrite the members `change` sets; UnknownRecord if there is no such refund."""
        return self.change_refunds([(refund_id, change, created_at)])[0]

    def change_refunds(self, edits: Sequence[Edit[LedgerRefundChange]]) -> list[Refund]:
        """Overwrite the members each change sets, every refund in one transaction: all of
        them, or none (UnknownRecord naming the first refund there is not)."""
        rows = [(refund_id, _values(change, created_at)) for refund_id, change, created_at in edits]
        with self._lock:
            changed = self._overwrite_all("refunds", "refund_id", rows, self._refund_by_id)
            for before, after in changed:
                self._refund_times.remove(before.created_at, before.refund_id)
                self._refund_times.add(after.created_at, after.refund_id)
                self._forget_refund(before)
                self._refunded[after.charge_id] = (
                    self._refunded.get(after.charge_id, 0) + after.amount_minor
                )
        return [after for _, after in changed]

    def drop_refund(self, refund_id: str) -> None:
        """Forget a refund; UnknownRecord if there is none."""
        with self._lock:
            before = self._refund_by_id(refund_id)
            if before is None:
                raise UnknownRecord(f"no refund {refund_id}")
            self._conn.execute("DELETE FROM refunds WHERE refund_id = ?", (refund_id,))
            self._refund_times.remove(before.created_at, refund_id)
            self._forget_refund(before)

    def _overwrite_all(
        self,
        table: str,
        id_column: str,
        rows: Sequence[tuple[str, dict[str, object]]],
        read: Callable[[str], _Record | None],
    ) -> list[tuple[_Record, _Record]]:
        """Set each row's values (column -> value; none is nothing to do) on the row of
        `table` with that id, in one transaction; each record before and after. Call under
        the lock; UnknownRecord, and nothing changed, if an id names no row."""
        changed: list[tuple[_Record, _Record]] = []
        self._conn.execute("BEGIN")
        try:
            for record_id, values in rows:
                before = read(record_id)
                if before is None:
                    raise UnknownRecord(f"no {table.removesuffix('s')} {record_id}")
                if values:
                    sets = ", ".join(f"{name} = :{name}" for name in values)
                    self._conn.execute(
                        f"UPDATE {table} SET {sets} WHERE {id_column} = :id",
                        {**values, "id": record_id},
                    )
                after = read(record_id)
                assert after is not None
                changed.append((before, after))
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")
        return changed

    def _forget_refund(self, refund: Refund) -> None:
        left = self._refunded.get(refund.charge_id, 0) - refund.amount_minor
        if left > 0:
            self._refunded[refund.charge_id] = left
        else:
            self._refunded.pop(refund.charge_id, None)

    def _refund_by_id(self, refund_id: str) -> Refund | None:
        row = self._conn.execute(
            f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE refund_id = ?", (refund_id,)
        ).fetchone()
        return None if row is None else _refund(row)

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
    return utc_timestamp(datetime.now(UTC))


def _values(change: BaseModel, created_at: str | None) -> dict[str, object]:
    """The columns a ledger edit overwrites: the members `change` sets (not the id that names
    the record in a change of many), `created_at` as the ledger writes it, and a charge's
    decline code, which follows its status."""
    values: dict[str, object] = change.model_dump(exclude_none=True, exclude=_NOT_COLUMNS)
    if values.get("status") is not None:
        values["decline_code"] = "card_declined" if values["status"] == "declined" else None
    if created_at is not None:
        values["created_at"] = created_at
    return values


def _refund(row: sqlite3.Row) -> Refund:
    return Refund.model_validate(dict(row))


def _charge(row: sqlite3.Row) -> Charge:
    return Charge.model_validate(dict(row))
