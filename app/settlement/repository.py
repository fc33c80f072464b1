"""The run's reads and writes: our records of a day, the items found, the settled lines
(the days' leases are in `days.py`).

Every statement is a constant; the run (`run.py`) decides, these carry it out. Items are
written by `write_items` in one transaction: the rows of the compared keys are locked first,
so a run's view of an item cannot change under it, and each change of an item's state is
audited in `reconciliation_item_changes` by the statement batch that makes it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from app.authorizations import books as authorization_books
from app.db.database import Connection
from app.payments import books as payment_books
from app.refunds import books as refund_books
from app.settlement.books import Settled, day_bounds
from app.settlement.matching import OurRecord
from app.settlement.rows import ItemKind, ItemState, RecordType

# Our records with their operations' states and the provider holding each, as the payments',
# the refunds' and the captures' own packages read them (`books.py` of each).
_OURS = {
    RecordType.CHARGE: payment_books.OURS_SQL,
    RecordType.REFUND: refund_books.OURS_SQL,
    RecordType.CAPTURE: authorization_books.OURS_SQL,
}
_ALIAS = {
    RecordType.CHARGE: payment_books.ALIAS,
    RecordType.REFUND: refund_books.ALIAS,
    RecordType.CAPTURE: authorization_books.ALIAS,
}


async def _our_records(
    conn: Connection, record_type: RecordType, condition: str, holds_sql: str, params: Any
) -> list[OurRecord]:
    """Our records of `record_type` where `condition` holds (on its package's alias); a
    manual payment's with what our books say it captured (`holds_sql`, read alike)."""
    sql = f"{_OURS[record_type]} WHERE {condition}"
    rows = await (await conn.execute(sql, params)).fetchall()
    records = [OurRecord(record_type, *row) for row in rows]
    if record_type is not RecordType.CHARGE or not records:
        return records
    holds = {
        payment_id: (captured, in_flight)
        for payment_id, captured, in_flight in await (
            await conn.execute(holds_sql, params)
        ).fetchall()
    }
    return [
        replace(
            record,
            manual=True,
            amount_captured_minor=holds[record.payment_id][0],
            modification_in_flight=holds[record.payment_id][1],
        )
        if record.payment_id in holds
        else record
        for record in records
    ]


async def ours_created_on(conn: Connection, record_type: RecordType, day: date) -> list[OurRecord]:
    """Our payments (or refunds, or captures) created on `day`, with their operations'
    states."""
    start, end = day_bounds(day)
    alias = _ALIAS[record_type]
    condition = f"{alias}.created_at >= %(start)s AND {alias}.created_at < %(end)s"
    params = {"start": start, "end": end}
    return await _our_records(
        conn, record_type, condition, authorization_books.HOLDS_CREATED_SQL, params
    )


async def ours_by_key(
    conn: Connection, record_type: RecordType, keys: Sequence[str]
) -> dict[str, OurRecord]:
    """Our payments (or refunds, or captures) under any of `keys` (their stored keys: a
    payment's attempt 0), whatever day they were made."""
    if not keys:
        return {}
    condition = f"{_ALIAS[record_type]}.provider_key = ANY(%(keys)s)"
    records = await _our_records(
        conn, record_type, condition, authorization_books.HOLDS_BY_KEY_SQL, {"keys": list(keys)}
    )
    return {record.provider_key: record for record in records}


@dataclass(frozen=True)
class Finding:
    """A difference as the run found it, ready to be written."""

    day: date
    record_type: RecordType
    # The provider whose books the record is (or should be) in.
    provider: str
    provider_key: str
    kind: ItemKind
    detail: str
    ours: OurRecord | None
    theirs: dict[str, Any] | None


@dataclass(frozen=True)
class Written:
    """What writing a run's findings did to the queue."""

    opened: int
    reopened: int
    updated: int
    kept_closed: int
    auto_resolved: int


_LOCK_ITEMS = """
    SELECT id, provider_key, kind, state FROM reconciliation_items
    WHERE record_type = %(record_type)s AND provider = %(provider)s
      AND provider_key = ANY(%(keys)s)
    FOR UPDATE
"""
_INSERT_ITEM = """
    INSERT INTO reconciliation_items (id, day, record_type, provider, provider_key, kind,
        state, tenant_id, operation_id, payment_id, refund_id, ours, theirs, detail)
    VALUES (%(id)s, %(day)s, %(record_type)s, %(provider)s, %(provider_key)s, %(kind)s, 'open',
        %(tenant_id)s, %(operation_id)s, %(payment_id)s, %(refund_id)s, %(ours)s, %(theirs)s,
        %(detail)s)
"""
# Seen again: the latest of both sides; an auto-resolved item whose difference came back
# opens again. A resolved or dismissed one stays as the operator left it.
_SEEN_AGAIN = """
    UPDATE reconciliation_items
    SET ours = %(ours)s, theirs = %(theirs)s, detail = %(detail)s, last_seen_at = now(),
        state = CASE WHEN state = 'auto_resolved' THEN 'open' ELSE state END
    WHERE id = %(id)s
"""
_AUTO_RESOLVE = """
    UPDATE reconciliation_items
    SET state = 'auto_resolved', last_seen_at = now()
    WHERE id = %(id)s AND state = 'open'
"""
_CHANGE = """
    INSERT INTO reconciliation_item_changes (item_id, from_state, to_state, actor, reason)
    VALUES (%(item_id)s, %(from_state)s, %(to_state)s, %(actor)s, %(reason)s)
"""


def _item_values(finding: Finding) -> dict[str, Any]:
    ours = finding.ours
    return {
        "day": finding.day,
        "record_type": finding.record_type.value,
        "provider": finding.provider,
        "provider_key": finding.provider_key,
        "kind": finding.kind.value,
        "detail": finding.detail,
        "tenant_id": ours.tenant_id if ours else None,
        "operation_id": ours.operation_id if ours else None,
        "payment_id": ours.payment_id if ours else None,
        "refund_id": ours.refund_id if ours else None,
        "ours": json.dumps(ours.snapshot()) if ours else None,
        "theirs": json.dumps(finding.theirs) if finding.theirs is not None else None,
    }


async def write_items(
    conn: Connection,
    record_type: RecordType,
    provider: str,
    compared: Iterable[str],
    findings: Sequence[Finding],
    *,
    actor: str,
    resolve_unfound: bool = True,
) -> Written:
    """Queue `findings` for the keys in `compared` (all of `record_type`, at `provider`), and
    auto-resolve every open item of those keys that the run did not find again. Call in a
    transaction.

    A writer that compared only part of a record (a provider's notification, which says
    what the record was when it was made: `app/settlement/notified.py`) passes
    `resolve_unfound=False`: it opens (or finds again) its findings and leaves every other
    item of the key as it is."""
    assert all(finding.provider == provider for finding in findings), provider
    keys = sorted(set(compared))
    params = {"record_type": record_type.value, "provider": provider, "keys": keys}
    rows = await (await conn.execute(_LOCK_ITEMS, params)).fetchall()
    existing: dict[tuple[str, str], tuple[uuid.UUID, str]] = {
        (key, kind): (item_id, state) for item_id, key, kind, state in rows
    }
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    kept_closed = reopened = 0
    found: set[tuple[str, str]] = set()
    for finding in findings:
        found.add((finding.provider_key, finding.kind.value))
        values = _item_values(finding)
        current = existing.get((finding.provider_key, finding.kind.value))
        if current is None:
            item_id = uuid.uuid4()
            inserts.append({**values, "id": item_id})
            changes.append(_change(item_id, None, ItemState.OPEN, actor, finding.detail))
            continue
        item_id, state = current
        updates.append({**values, "id": item_id})
        if state == ItemState.AUTO_RESOLVED:
            reopened += 1
            changes.append(_change(item_id, state, ItemState.OPEN, actor, "found again"))
        elif state != ItemState.OPEN:
            kept_closed += 1
    resolved: list[dict[str, Any]] = []
    for (key, kind), (item_id, state) in existing.items():
        if resolve_unfound and state == ItemState.OPEN and (key, kind) not in found:
            resolved.append({"id": item_id})
            reason = "settled" if kind == ItemKind.EXPECTED else "no longer differs"
            changes.append(_change(item_id, state, ItemState.AUTO_RESOLVED, actor, reason))
    async with conn.cursor() as cur:
        if inserts:
            await cur.executemany(_INSERT_ITEM, inserts)
        if updates:
            await cur.executemany(_SEEN_AGAIN, updates)
        if resolved:
            await cur.executemany(_AUTO_RESOLVE, resolved)
        if changes:
            await cur.executemany(_CHANGE, changes)
    return Written(
        opened=len(inserts),
        reopened=reopened,
        updated=len(updates) - reopened - kept_closed,
        kept_closed=kept_closed,
        auto_resolved=len(resolved),
    )


def _change(
    item_id: uuid.UUID, from_state: str | None, to_state: ItemState, actor: str, reason: str
) -> dict[str, Any]:
    return {
        "item_id": item_id,
        "from_state": from_state,
        "to_state": to_state.value,
        "actor": actor,
        "reason": reason,
    }


_RECORD_LINES = """
    INSERT INTO settlement_lines (provider, provider_id, record_type, provider_key, payment_id,
        refund_id, gross_minor, fee_minor, net_minor, currency, payout_id, settled_on)
    SELECT %(provider)s, * FROM unnest(%(provider_id)s::text[], %(record_type)s::text[],
        %(provider_key)s::text[], %(payment_id)s::uuid[], %(refund_id)s::uuid[],
        %(gross)s::bigint[], %(fee)s::bigint[], %(net)s::bigint[], %(currency)s::text[],
        %(payout_id)s::text[], %(settled_on)s::date[])
    ON CONFLICT (provider, provider_id) DO NOTHING
"""


async def record_lines(
    conn: Connection, provider: str, lines: Sequence[tuple[Settled, OurRecord | None]]
) -> int:
    """Store each line of `provider`'s report with our payment (and refund) it belongs to; a
    line already stored is left alone (a report's lines do not change). The lines newly
    stored."""
    if not lines:
        return 0
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "provider_id",
            "record_type",
            "provider_key",
            "payment_id",
            "refund_id",
            "gross",
            "fee",
            "net",
            "currency",
            "payout_id",
            "settled_on",
        )
    }
    for line, ours in lines:
        columns["provider_id"].append(line.provider_id)
        columns["record_type"].append(line.record_type.value)
        columns["provider_key"].append(line.provider_key)
        columns["payment_id"].append(ours.payment_id if ours else None)
        columns["refund_id"].append(ours.refund_id if ours else None)
        columns["gross"].append(line.gross_minor)
        columns["fee"].append(line.fee_minor)
        columns["net"].append(line.net_minor)
        columns["currency"].append(line.currency)
        columns["payout_id"].append(line.payout_id)
        columns["settled_on"].append(line.settled_on)
    cursor = await conn.execute(_RECORD_LINES, {"provider": provider, **columns})
    return cursor.rowcount


# One tenant's operations: on Citus a write must route to one shard group (docs/scaling.md).
_RECOVER_NOW = """
    UPDATE operations SET next_check_at = now()
    WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s)
      AND state = 'UNKNOWN_REQUIRES_RECOVERY' AND next_check_at > now()
"""


async def recover_now(conn: Connection, operations: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Make the unknown operations among `operations` (tenant, operation id) due for the
    reconciler at once, one statement per tenant (an operation in flight is the
    reconciler's as soon as its owner's lease runs out)."""
    by_tenant: dict[uuid.UUID, list[uuid.UUID]] = {}
    for tenant_id, operation_id in operations:
        by_tenant.setdefault(tenant_id, []).append(operation_id)
    for tenant_id, ids in by_tenant.items():
        await conn.execute(_RECOVER_NOW, {"tenant_id": tenant_id, "ids": ids})
