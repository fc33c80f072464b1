"""The ledger's edits for tests (`/_ledger`, admin API only): the provider's books made to
disagree with the service's.

No rule beyond the columns' own is checked: an edited charge may have refunds worth more
than it, or a declined one refunds. The listings' timelines and the refunded amounts the
ledger keeps in memory follow every edit, under the ledger's lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel

from fake_provider.ledger import Ledger
from fake_provider.ledger_results import LedgerEditError, UnknownRecord
from fake_provider.schemas import (
    Charge,
    LedgerChargeChange,
    LedgerChargeRequest,
    LedgerRefundChange,
    Refund,
)
from fake_provider.timeline import now_timestamp

# The members of a ledger edit that are not columns to overwrite: the time as given (the
# ledger writes its own form) and the id naming the record in a change of many.
_NOT_COLUMNS = {"created_at", "charge_id", "refund_id"}

_Change = TypeVar("_Change", bound=BaseModel)
_Record = TypeVar("_Record", Charge, Refund)
# One record's change in an edit of the ledger: its id, the change, and `created_at` as the
# ledger writes it (None: unchanged).
Edit = tuple[str, _Change, str | None]


class EditableLedger(Ledger):
    """The ledger, and the edits the reconciliation tests make to it."""

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
            "created_at": created_at or now_timestamp(),
            "capture": "automatic",
        }
        with self._lock:
            charge = self._insert_charge(params)
        if charge is None:
            raise LedgerEditError(f"a charge has the key {request.idempotency_key!r}")
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
        refunds (drop them first: every refund keeps its charge), captures or a void (which
        no edit drops)."""
        with self._lock:
            before = self._charge_by_id(charge_id)
            if before is None:
                raise UnknownRecord(f"no charge {charge_id}")
            if charge_id in self._refunded:
                raise LedgerEditError(f"charge {charge_id} has refunds; drop them first")
            if charge_id in self._captured or charge_id in self._voided:
                raise LedgerEditError(f"charge {charge_id} has captures or a void; it stays")
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
