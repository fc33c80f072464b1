"""The provider's ledger: every charge, refund, capture and void it made, in one SQLite file
that outlives the process (its schema, upgraded in place for an older file:
`ledger_schema.py`; its statements: `ledger_sql.py`; what it answers: `ledger_results.py`;
the captures and voids of authorizations: `ledger_two_step.py`).

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
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Self

from fake_provider import ledger_schema
from fake_provider.ledger_results import Recorded, RecordedRefund, UnknownRecord
from fake_provider.ledger_sql import (
    CHARGE_COLUMNS,
    INSERT_CHARGE,
    INSERT_REFUND,
    LISTED_REFUND,
    REFUND_COLUMNS,
    insert_record,
    refund_from_row,
    rows_by_id,
    timeline_key,
)
from fake_provider.ledger_two_step import TwoStepBooks
from fake_provider.notify_outbox import Outbox
from fake_provider.schemas import (
    Charge,
    ChargeRequest,
    ChargeStatus,
    ListedCharge,
    ListedChargeStatus,
    ListedRefund,
    Refund,
    RefundRequest,
)
from fake_provider.timeline import Key, Timeline, now_timestamp

if TYPE_CHECKING:
    from fake_provider.notifications import Announcer


class Ledger(TwoStepBooks):
    """Charges by idempotency key, their refunds, and the captures and voids of authorizations
    (`TwoStepBooks`); safe to call from several threads.

    `EditableLedger` (`ledger_edits.py`) adds the edits the reconciliation tests make.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._conn = connection
        # The app calls the ledger inline on its event loop, one statement at a time; the lock
        # keeps the class safe for threads too (sqlite3 connections are not safe for concurrent
        # use), and costs next to nothing uncontended.
        self._lock = threading.Lock()
        # The notifications outbox, in the same file, under the same lock.
        self.outbox = Outbox(connection, self._lock)
        # In memory, read once here and kept in step by every write below (this process is
        # the ledger's only writer): the records in creation order, for the listings and the
        # settlement reports, and what each refunded charge has given back (and, read by
        # `_read_two_step`, the same of captures and voids).
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
        self._read_two_step(connection)

    @classmethod
    def open(cls, path: Path) -> Self:
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
        try:
            ledger_schema.prepare(conn)
        except BaseException:
            conn.close()
            raise
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
        notify: Announcer | None = None,
    ) -> Recorded:
        """Create the charge for `key`, or return the one already stored under it; with
        `notify`, the event of a charge created is stored with it.

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
            "created_at": now_timestamp(),
            "capture": request.capture,
        }
        with self._lock:
            charge = self._insert_charge(params, notify)
            if charge is not None:
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
            rows = self._conn.execute(
                f"SELECT {CHARGE_COLUMNS} FROM charges ORDER BY seq"
            ).fetchall()
            return [self._charge(row) for row in rows]

    def record_refund(
        self, key: str, request: RefundRequest, notify: Announcer | None = None
    ) -> RecordedRefund:
        """Create the refund for `key` if the charge has that much left (a succeeded charge
        its amount, an authorization its captures, less their refunds), with its event if
        `notify`; or return the one already stored under the key; or say why nothing was
        stored."""
        params = {
            "refund_id": f"re_{uuid.uuid4().hex}",
            "charge_id": request.charge_id,
            "idempotency_key": key,
            "amount_minor": request.amount_minor,
            "created_at": now_timestamp(),
        }
        with self._lock:
            refund = insert_record(self._conn, INSERT_REFUND, params, refund_from_row, notify)
            if refund is not None:
                self._refund_times.add(refund.created_at, refund.refund_id)
                self._refunded[refund.charge_id] = (
                    self._refunded.get(refund.charge_id, 0) + refund.amount_minor
                )
                return RecordedRefund(refund, created=True)
            existing = self._find_refund(key)
            if existing is not None:
                return RecordedRefund(existing, created=False)
            charge = self._charge_by_id(request.charge_id)
        if charge is None or charge.status == "declined":
            return RecordedRefund(None, False, f"no succeeded charge {request.charge_id}")
        if charge.status == "authorized":
            return RecordedRefund(
                None, False, "the refund exceeds what is captured of the charge less its refunds"
            )
        return RecordedRefund(None, False, "the refund exceeds what is left of the charge")

    def find_refund(self, key: str) -> Refund | None:
        """The refund stored under `key`, if any."""
        with self._lock:
            return self._find_refund(key)

    def charge_by_id(self, charge_id: str) -> Charge | None:
        """The charge with this id, if any."""
        with self._lock:
            return self._charge_by_id(charge_id)

    def account_of(self, charge_id: str) -> str | None:
        """The account of the charge with this id (what fault rules match a refund, capture
        or void on); None if there is no such charge."""
        with self._lock:
            row = self._conn.execute(
                "SELECT account_id FROM charges WHERE charge_id = ?", (charge_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def refunds(self) -> list[Refund]:
        """Every refund, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {REFUND_COLUMNS} FROM refunds ORDER BY seq"
            ).fetchall()
        return [refund_from_row(row) for row in rows]

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
            rows = rows_by_id(
                self._conn, f"SELECT {CHARGE_COLUMNS} FROM charges", "charge_id", found.ids
            )
            return [self._listed_charge(rows[i]) for i in found.ids], found.has_more

    def refund_page(
        self, *, gte: str | None, lt: str | None, after: str | None, limit: int | None
    ) -> tuple[list[ListedRefund], bool]:
        """Refunds created in [gte, lt), after the refund `after`, up to `limit`; and
        whether more follow. UnknownRecord if `after` names no refund."""
        with self._lock:
            cursor = None if after is None else self._refund_key(after)
            found = self._refund_times.window(gte=gte, lt=lt, after=cursor, limit=limit)
            rows = rows_by_id(self._conn, LISTED_REFUND, "r.refund_id", found.ids)
            return [ListedRefund.model_validate(dict(rows[i])) for i in found.ids], found.has_more

    def _charge_key(self, charge_id: str) -> Key:
        key = timeline_key(self._conn, "charges", "charge_id", charge_id)
        if key is None:
            raise UnknownRecord(f"no charge {charge_id}")
        return key

    def _refund_key(self, refund_id: str) -> Key:
        key = timeline_key(self._conn, "refunds", "refund_id", refund_id)
        if key is None:
            raise UnknownRecord(f"no refund {refund_id}")
        return key

    def _charge(self, row: sqlite3.Row) -> Charge:
        """The charge a row of `charges` holds, with what was captured of it; under the lock."""
        stored = dict(row)
        return Charge.model_validate({**stored, **self._two_step_members(stored)})

    def _listed_charge(self, row: sqlite3.Row) -> ListedCharge:
        stored = dict(row)
        refunded = self._refunded.get(row["charge_id"], 0)
        status: ListedChargeStatus = row["status"]
        if status == "succeeded" and refunded > 0:
            status = "refunded" if refunded >= row["amount_minor"] else "partially_refunded"
        return ListedCharge.model_validate(
            {
                **stored,
                **self._two_step_members(stored),
                "status": status,
                "amount_refunded_minor": refunded,
            }
        )

    def _insert_charge(
        self, params: Mapping[str, object], notify: Announcer | None = None
    ) -> Charge | None:
        """Insert the charge `params` describe unless one has its key (None then), with its
        event if `notify`; under the lock."""
        charge = insert_record(self._conn, INSERT_CHARGE, params, self._charge, notify)
        if charge is None:
            return None
        self._charge_times.add(charge.created_at, charge.charge_id)
        return charge

    def _forget_refund(self, refund: Refund) -> None:
        left = self._refunded.get(refund.charge_id, 0) - refund.amount_minor
        if left > 0:
            self._refunded[refund.charge_id] = left
        else:
            self._refunded.pop(refund.charge_id, None)

    def _refund_by_id(self, refund_id: str) -> Refund | None:
        row = self._conn.execute(
            f"SELECT {REFUND_COLUMNS} FROM refunds WHERE refund_id = ?", (refund_id,)
        ).fetchone()
        return None if row is None else refund_from_row(row)

    def _find_refund(self, key: str) -> Refund | None:
        row = self._conn.execute(
            f"SELECT {REFUND_COLUMNS} FROM refunds WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return None if row is None else refund_from_row(row)

    def _charge_by_id(self, charge_id: str) -> Charge | None:
        row = self._conn.execute(
            f"SELECT {CHARGE_COLUMNS} FROM charges WHERE charge_id = ?", (charge_id,)
        ).fetchone()
        return None if row is None else self._charge(row)

    def _find(self, key: str) -> Charge | None:
        row = self._conn.execute(
            f"SELECT {CHARGE_COLUMNS} FROM charges WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return None if row is None else self._charge(row)
