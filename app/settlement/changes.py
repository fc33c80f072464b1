"""An operator's change of a discrepancy's state, with its audit row.

Every change is audited in `reconciliation_item_changes` (from state, to state, actor,
reason, when): the settlement run writes its own (opened, auto-resolved, opened again) in
its batch (`repository.py`); `close` is an operator's resolve or dismiss.

Closing is the item's `UPDATE ... WHERE state = 'open'` and its audit row's `INSERT` in one
CTE, so both land or neither does. Two operators closing one item at once queue on its row
lock; the second then finds it no longer open, writes nothing and is told so (409), after a
read that tells a missing item (404) from a closed one.
"""

from __future__ import annotations

import unicodedata
import uuid

from psycopg.rows import class_row

from app.db.database import Connection
from app.errors import NotFound, ValidationFailed
from app.settlement.errors import ItemNotOpen
from app.settlement.rows import ItemRow, ItemState

MAX_REASON = 1000

ITEM_COLUMNS = (
    "id, day, record_type, provider, provider_key, kind, state, tenant_id, operation_id,"
    " payment_id, refund_id, ours, theirs, detail, first_seen_at, last_seen_at, resolved_at,"
    " resolved_by, resolution_reason"
)


# Close an open item and audit it, in one statement: nothing is written unless the item
# was still open when its row lock was taken.
_CLOSE_SQL = f"""
    WITH closed AS (
        UPDATE reconciliation_items
        SET state = %(to_state)s, resolved_at = now(), resolved_by = %(actor)s,
            resolution_reason = %(reason)s
        WHERE id = %(id)s AND state = 'open'
        RETURNING {ITEM_COLUMNS}
    ), audit AS (
        INSERT INTO reconciliation_item_changes (item_id, from_state, to_state, actor, reason)
        SELECT id, 'open', state, resolved_by, resolution_reason FROM closed
    )
    SELECT {ITEM_COLUMNS} FROM closed
    """


def check_reason(reason: str) -> str:
    """The reason as stored (trimmed), or `ValidationFailed`: 1 to `MAX_REASON` characters
    of text (no control characters but tabs and line breaks)."""
    text = reason.strip()
    problem = None
    if not text:
        problem = "a reason is required"
    elif len(text) > MAX_REASON:
        problem = f"at most {MAX_REASON} characters"
    elif any(ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cs") for ch in text):
        # NUL cannot be stored at all; other control characters are a client's bug.
        problem = "must not contain control characters"
    if problem is not None:
        raise ValidationFailed(
            f"reason: {problem}", errors=[{"field": "reason", "message": problem}]
        )
    return text


async def close(
    conn: Connection, item_id: uuid.UUID, to_state: ItemState, *, actor: str, reason: str
) -> ItemRow:
    """Move an open item to `to_state` (resolved or dismissed), audited; the item as it is
    now.

    `NotFound` if there is no such item, `ItemNotOpen` if it is not open (nothing changed).
    """
    assert to_state in (ItemState.RESOLVED, ItemState.DISMISSED), to_state
    params = {"id": item_id, "to_state": to_state.value, "actor": actor, "reason": reason}
    async with conn.cursor(row_factory=class_row(ItemRow)) as cur:
        await cur.execute(_CLOSE_SQL, params)
        item = await cur.fetchone()
    if item is not None:
        return item
    row = await (
        await conn.execute("SELECT state FROM reconciliation_items WHERE id = %s", (item_id,))
    ).fetchone()
    if row is None:
        raise NotFound("no such discrepancy")
    raise ItemNotOpen(
        f"the item is {row[0]}, not open: only an open item can be resolved or dismissed;"
        " nothing was changed",
        item_id=str(item_id),
        state=row[0],
    )
