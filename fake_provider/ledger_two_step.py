"""The captures and voids of authorizations: the part of the ledger that two-step payments
add (`TwoStepBooks`, which `Ledger` is made of, beside its charges and refunds).

An authorization (a manual charge, `authorized`) holds its amount until it is captured, in
one or several captures that never add up to more than it, or voided, which releases what
was left to capture; nothing is captured after a void. Each capture and void is made once
per idempotency key, like a refund: the unique key decides races, and the checks of what is
left are made by the insert itself (`ledger_sql.INSERT_CAPTURE`, `INSERT_VOID`), under the
ledger's lock.

What each authorization has captured and whether it was voided are kept in memory, read
from the file when the ledger opens and kept in step by every capture and void, so that a
charge's body (`amount_captured_minor`, `voided`) costs no extra read.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from typing import TYPE_CHECKING, Any

from fake_provider.ledger_results import RecordedCapture, RecordedVoid, UnknownRecord
from fake_provider.ledger_sql import (
    CAPTURE_COLUMNS,
    INSERT_CAPTURE,
    INSERT_VOID,
    VOID_COLUMNS,
    capture_from_row,
    insert_record,
    rows_by_id,
    timeline_key,
    void_from_row,
)
from fake_provider.schemas import Capture, CaptureRequest, Void
from fake_provider.timeline import Timeline, now_timestamp

if TYPE_CHECKING:
    from fake_provider.notifications import Announcer


class TwoStepBooks:
    """Captures and voids by idempotency key; `Ledger` opens the file and holds the lock."""

    _conn: sqlite3.Connection
    _lock: threading.Lock
    _capture_times: Timeline
    _void_times: Timeline
    # Per authorization with captures: what they add up to.
    _captured: dict[str, int]
    # The authorizations that were voided.
    _voided: set[str]

    def _read_two_step(self, connection: sqlite3.Connection) -> None:
        """Read what the file holds of captures and voids into memory; once, at open."""
        self._capture_times = Timeline(
            (row[0], row[1])
            for row in connection.execute("SELECT created_at, capture_id FROM captures")
        )
        self._void_times = Timeline(
            (row[0], row[1]) for row in connection.execute("SELECT created_at, void_id FROM voids")
        )
        self._captured = {
            row[0]: row[1]
            for row in connection.execute(
                "SELECT charge_id, sum(amount_minor) FROM captures GROUP BY charge_id"
            )
        }
        self._voided = {row[0] for row in connection.execute("SELECT charge_id FROM voids")}

    def _two_step_members(self, charge: dict[str, Any]) -> dict[str, Any]:
        """What a charge's body says of its captures: `amount_captured_minor` (an automatic
        charge's amount if it succeeded) and `voided`. Call under the lock."""
        charge_id: str = charge["charge_id"]
        if charge["capture"] == "automatic":
            captured = charge["amount_minor"] if charge["status"] == "succeeded" else 0
        else:
            captured = self._captured.get(charge_id, 0)
        return {"amount_captured_minor": captured, "voided": charge_id in self._voided}

    def has_captures_or_voids(self, charge_id: str) -> bool:
        """Whether the charge was captured or voided (its records keep it in the ledger)."""
        with self._lock:
            return charge_id in self._captured or charge_id in self._voided

    def record_capture(
        self,
        charge_id: str,
        key: str,
        request: CaptureRequest,
        notify: Announcer | None = None,
    ) -> RecordedCapture:
        """Capture `request.amount_minor` of the authorization `charge_id` under `key` if it has
        that much left to capture and is not voided, with its event if `notify`; or return the
        capture already stored under the key; or say why nothing was stored."""
        params = {
            "capture_id": f"cp_{uuid.uuid4().hex}",
            "charge_id": charge_id,
            "idempotency_key": key,
            "amount_minor": request.amount_minor,
            "created_at": now_timestamp(),
        }
        with self._lock:
            capture = insert_record(self._conn, INSERT_CAPTURE, params, capture_from_row, notify)
            if capture is not None:
                self._capture_times.add(capture.created_at, capture.capture_id)
                self._captured[charge_id] = self._captured.get(charge_id, 0) + capture.amount_minor
                return RecordedCapture(capture, created=True)
            existing = self._find_capture(key)
            if existing is not None:
                return RecordedCapture(existing, created=False)
            refused = self._refusal(charge_id, request.amount_minor)
        return RecordedCapture(None, False, refused)

    def record_void(
        self, charge_id: str, key: str, notify: Announcer | None = None
    ) -> RecordedVoid:
        """Void the authorization `charge_id` under `key`, releasing what is left to capture,
        if it is neither voided nor captured in full, with its event if `notify`; or return
        the void already stored under the key; or say why nothing was stored."""
        params = {
            "void_id": f"vd_{uuid.uuid4().hex}",
            "charge_id": charge_id,
            "idempotency_key": key,
            "created_at": now_timestamp(),
        }
        with self._lock:
            void = insert_record(self._conn, INSERT_VOID, params, void_from_row, notify)
            if void is not None:
                self._void_times.add(void.created_at, void.void_id)
                self._voided.add(charge_id)
                return RecordedVoid(void, created=True)
            existing = self._find_void(key)
            if existing is not None:
                return RecordedVoid(existing, created=False)
            refused = self._refusal(charge_id, None)
        return RecordedVoid(None, False, refused)

    def find_capture(self, key: str) -> Capture | None:
        """The capture stored under `key`, if any."""
        with self._lock:
            return self._find_capture(key)

    def find_void(self, key: str) -> Void | None:
        """The void stored under `key`, if any."""
        with self._lock:
            return self._find_void(key)

    def captures(self) -> list[Capture]:
        """Every capture, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {CAPTURE_COLUMNS} FROM captures ORDER BY seq"
            ).fetchall()
        return [capture_from_row(row) for row in rows]

    def voids(self) -> list[Void]:
        """Every void, oldest first."""
        with self._lock:
            rows = self._conn.execute(f"SELECT {VOID_COLUMNS} FROM voids ORDER BY seq").fetchall()
        return [void_from_row(row) for row in rows]

    def capture_page(
        self, *, gte: str | None, lt: str | None, after: str | None, limit: int | None
    ) -> tuple[list[Capture], bool]:
        """Captures created in [gte, lt), after the capture `after`, up to `limit`; and
        whether more follow. UnknownRecord if `after` names no capture."""
        with self._lock:
            cursor = None
            if after is not None:
                cursor = timeline_key(self._conn, "captures", "capture_id", after)
                if cursor is None:
                    raise UnknownRecord(f"no capture {after}")
            found = self._capture_times.window(gte=gte, lt=lt, after=cursor, limit=limit)
            rows = rows_by_id(
                self._conn, f"SELECT {CAPTURE_COLUMNS} FROM captures", "capture_id", found.ids
            )
            return [capture_from_row(rows[i]) for i in found.ids], found.has_more

    def void_page(
        self, *, gte: str | None, lt: str | None, after: str | None, limit: int | None
    ) -> tuple[list[Void], bool]:
        """Voids created in [gte, lt), after the void `after`, up to `limit`; and whether
        more follow. UnknownRecord if `after` names no void."""
        with self._lock:
            cursor = None
            if after is not None:
                cursor = timeline_key(self._conn, "voids", "void_id", after)
                if cursor is None:
                    raise UnknownRecord(f"no void {after}")
            found = self._void_times.window(gte=gte, lt=lt, after=cursor, limit=limit)
            rows = rows_by_id(self._conn, f"SELECT {VOID_COLUMNS} FROM voids", "void_id", found.ids)
            return [void_from_row(rows[i]) for i in found.ids], found.has_more

    def _refusal(self, charge_id: str, amount_minor: int | None) -> str:
        """Why a capture of `amount_minor` (None: a void) of `charge_id` was refused: it is
        unknown, not an authorization, voided, captured in full, or has less left to capture.
        Call under the lock."""
        row = self._conn.execute(
            "SELECT status, amount_minor FROM charges WHERE charge_id = ?", (charge_id,)
        ).fetchone()
        if row is None:
            return f"no charge {charge_id}"
        if row["status"] != "authorized":
            was = "was declined" if row["status"] == "declined" else row["status"]
            return f"charge {charge_id} is not an authorization (it {was})"
        if charge_id in self._voided:
            return f"charge {charge_id} is voided"
        left = row["amount_minor"] - self._captured.get(charge_id, 0)
        if left <= 0:
            return f"charge {charge_id} is captured in full: nothing is left of it"
        if amount_minor is None:
            # The void's insert checks what this does, under the same lock: not reached.
            return f"charge {charge_id} cannot be voided"
        return f"the capture exceeds what is left to capture of charge {charge_id} ({left})"

    def _find_capture(self, key: str) -> Capture | None:
        row = self._conn.execute(
            f"SELECT {CAPTURE_COLUMNS} FROM captures WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return None if row is None else capture_from_row(row)

    def _find_void(self, key: str) -> Void | None:
        row = self._conn.execute(
            f"SELECT {VOID_COLUMNS} FROM voids WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return None if row is None else void_from_row(row)
