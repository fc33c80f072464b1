"""The discrepancy queue as operators work it: read, counted, resolved and dismissed.

The settlement run opens items (and auto-resolves those a later run finds agreeing); an
operator closes the others, as `resolved` (the difference is explained or fixed elsewhere)
or `dismissed` (it was never a real difference), always with a reason, each change audited
(`changes.py`: one statement writes the state and its audit row, guarded against a
concurrent change).

Lists are paged by keyset on (first_seen_at, id), oldest first, as the operations' are
(`app/operations/operator_reads.py`). The open queue, by kind or not, walks the partial index
`ix_reconciliation_items_open` (kind, first_seen_at, id) WHERE state = 'open'; the state is
written into the statement as a literal (from the enum), never a parameter, so that a
prepared statement's generic plan may still use that partial index.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import Any

from psycopg.rows import class_row

from app.db.database import Connection, Database
from app.errors import NotFound
from app.settlement.changes import ITEM_COLUMNS, check_reason, close
from app.settlement.errors import ItemNotOpen
from app.settlement.rows import ChangeRow, ItemKind, ItemRow, ItemState, RecordType

logger = logging.getLogger("payments.settlement")

MAX_PAGE = 100


class StateFilter(StrEnum):
    """The states a list may ask for: one of the items' states, or `all` of them."""

    OPEN = ItemState.OPEN.value
    AUTO_RESOLVED = ItemState.AUTO_RESOLVED.value
    RESOLVED = ItemState.RESOLVED.value
    DISMISSED = ItemState.DISMISSED.value
    ALL = "all"


@dataclass(frozen=True)
class ItemFilter:
    """What an operator asks for: the open queue unless told otherwise."""

    state: StateFilter = StateFilter.OPEN
    kind: ItemKind | None = None
    record_type: RecordType | None = None
    tenant_id: uuid.UUID | None = None
    day: date | None = None
    # The last item id of the previous page.
    after: uuid.UUID | None = None


@dataclass(frozen=True)
class Page:
    items: list[ItemRow]
    has_more: bool


@dataclass(frozen=True)
class Summary:
    """Open items by kind (every kind, zeros included), the oldest open one's age, and how
    many items are in each state."""

    open_by_kind: dict[str, int]
    oldest_open_s: float | None
    by_state: dict[str, int]


@dataclass(frozen=True)
class ItemDetail:
    item: ItemRow
    # Oldest first.
    history: list[ChangeRow]


def list_sql(flt: ItemFilter, *, limit: int) -> tuple[str, dict[str, Any]]:
    """The list's statement (one row more than `limit`, to tell whether more follow)."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit + 1}
    if flt.state is not StateFilter.ALL:
        # A literal from the enum: the partial index's own predicate for the open queue.
        where.append(f"state = '{ItemState(flt.state.value).value}'")
    if flt.kind is not None:
        where.append("kind = %(kind)s")
        params["kind"] = flt.kind.value
    if flt.record_type is not None:
        where.append("record_type = %(record_type)s")
        params["record_type"] = flt.record_type.value
    if flt.tenant_id is not None:
        where.append("tenant_id = %(tenant_id)s")
        params["tenant_id"] = flt.tenant_id
    if flt.day is not None:
        where.append("day = %(day)s")
        params["day"] = flt.day
    if flt.after is not None:
        where.append(
            "(first_seen_at, id) >"
            " (SELECT first_seen_at, id FROM reconciliation_items WHERE id = %(after)s)"
        )
        params["after"] = flt.after
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = (
        f"SELECT {ITEM_COLUMNS} FROM reconciliation_items{clause}"
        " ORDER BY first_seen_at, id LIMIT %(limit)s"
    )
    return sql, params


async def list_items(conn: Connection, flt: ItemFilter, *, limit: int) -> Page:
    """Up to `limit` items matching `flt`, oldest first, after the cursor if any."""
    sql, params = list_sql(flt, limit=limit)
    async with conn.cursor(row_factory=class_row(ItemRow)) as cur:
        await cur.execute(sql, params)
        rows = await cur.fetchall()
    return Page(items=rows[:limit], has_more=len(rows) > limit)


# The open items by kind, and each kind's oldest, from the partial index alone (it holds
# only open rows, and kind and first_seen_at are its columns): what the queue holds, not
# what the table does. The metrics' backlog reading (`app/backlog.py`) uses it too.
OPEN_BY_KIND_SQL = (
    "SELECT kind, count(*), extract(epoch FROM now() - min(first_seen_at))"
    " FROM reconciliation_items WHERE state = 'open' GROUP BY kind"
)
# Every item by state: a scan of the table, for the summary an operator asks for (the
# table holds differences only, never a row per payment).
_BY_STATE_SQL = "SELECT state, count(*) FROM reconciliation_items GROUP BY state"


async def open_by_kind(conn: Connection) -> tuple[dict[str, int], float | None]:
    """Open items by kind (every kind, zeros included) and the oldest one's age in seconds
    (None when the queue is empty)."""
    rows = await (await conn.execute(OPEN_BY_KIND_SQL)).fetchall()
    counts = {kind.value: 0 for kind in ItemKind}
    counts.update({str(kind): int(n) for kind, n, _ in rows})
    ages = [float(age) for _, _, age in rows]
    return counts, (max(ages) if ages else None)


async def summary(conn: Connection) -> Summary:
    counts, oldest = await open_by_kind(conn)
    rows = await (await conn.execute(_BY_STATE_SQL)).fetchall()
    by_state = {state.value: 0 for state in ItemState}
    by_state.update({str(state): int(n) for state, n in rows})
    return Summary(open_by_kind=counts, oldest_open_s=oldest, by_state=by_state)


async def read_item(conn: Connection, item_id: uuid.UUID) -> ItemDetail | None:
    """The item with its changes, oldest first; None if there is no such item."""
    async with conn.cursor(row_factory=class_row(ItemRow)) as cur:
        await cur.execute(
            f"SELECT {ITEM_COLUMNS} FROM reconciliation_items WHERE id = %s", (item_id,)
        )
        item = await cur.fetchone()
    if item is None:
        return None
    async with conn.cursor(row_factory=class_row(ChangeRow)) as cur:
        await cur.execute(
            "SELECT from_state, to_state, actor, reason, at FROM reconciliation_item_changes"
            " WHERE item_id = %s ORDER BY at, id",
            (item_id,),
        )
        history = await cur.fetchall()
    return ItemDetail(item=item, history=history)


class DiscrepancyQueue:
    """The queue for operators: one implementation behind the admin API and the console
    (and, through the admin API, the `payments ops discrepancies` commands)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def list(self, flt: ItemFilter, *, limit: int) -> Page:
        async with self._db.connection() as conn:
            return await list_items(conn, flt, limit=limit)

    async def summary(self) -> Summary:
        async with self._db.connection() as conn:
            return await summary(conn)

    async def read(self, item_id: uuid.UUID) -> ItemDetail:
        """The item with its history; `NotFound` if there is none."""
        async with self._db.connection() as conn:
            detail = await read_item(conn, item_id)
        if detail is None:
            raise NotFound("no such discrepancy")
        return detail

    async def resolve(self, item_id: uuid.UUID, actor: str, reason: str) -> ItemRow:
        """Close an open item as resolved: the difference is explained or fixed elsewhere."""
        return await self._close(item_id, ItemState.RESOLVED, actor, reason)

    async def dismiss(self, item_id: uuid.UUID, actor: str, reason: str) -> ItemRow:
        """Close an open item as dismissed: it was never a real difference."""
        return await self._close(item_id, ItemState.DISMISSED, actor, reason)

    async def _close(
        self, item_id: uuid.UUID, to_state: ItemState, actor: str, reason: str
    ) -> ItemRow:
        text = check_reason(reason)
        fields = {"item_id": str(item_id), "actor": actor, "to_state": to_state.value}
        try:
            async with self._db.connection() as conn:
                item = await close(conn, item_id, to_state, actor=actor, reason=text)
        except ItemNotOpen as exc:
            logger.warning(
                "discrepancy change refused", extra={"fields": {**fields, "code": exc.code}}
            )
            raise
        logger.warning("discrepancy closed by an operator", extra={"fields": fields})
        return item
