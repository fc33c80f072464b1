"""Reads of operations and their audit trail (writes are in `repository.py`, `leases.py`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

from app.db.database import Connection
from app.ids import created_window, within
from app.operations.states import State
from app.operations.values import (
    OPERATION_COLUMNS,
    OperationRow,
    OwnedRef,
    Snapshot,
    TransitionRow,
)

# The flags are computed on the database clock. A key expires only once its operation is
# terminal (in-flight work never expires), and its TTL counts from when the outcome became
# known.
SNAPSHOT_COLUMNS = f"""
    {OPERATION_COLUMNS},
    lease_expires_at IS NOT NULL AND lease_expires_at > now() AS lease_live,
    state IN ('COMPLETED', 'FAILED') AND (
        response_expired_at IS NOT NULL
        OR completed_at < now() - make_interval(secs => %(key_ttl_s)s)
    ) AS key_expired
"""
# What the operation acts on, as its kind's table holds it: `operation_links` has one branch
# per kind's table (migrations), each read by that table's unique `operation_id` index. Read
# for the operation's representation only (`views.py`), never by the claim or a takeover.
# `links_on_day` (migration 0035) reads it with the operation's day as a value: one day of
# `payments` planned and probed. Before 0035 the view is read by `operation_id` alone, and
# its payments' branch plans and probes every day of `payments` (4.5 ms against 1.1 ms a
# read, 30 days of 2 million payments: docs/benchmark.md).
LINKS_COLUMN = "links_on_day(operations.id, operations.created_at) AS links"
LINKS_OF_EVERY_DAY = (
    "(SELECT l.links FROM operation_links l WHERE l.operation_id = operations.id) AS links"
)
# The history rides along as one JSON array, so a read with its history is one round trip.
# The audit trail is partitioned by its operation's day: naming that day reads one partition
# (tests/partitions/test_pruning.py). Where the statement has the day as a parameter (a read
# on the operation's day) the history names the parameter, so the planner keeps that one
# partition. A read by id names the window of `created_at` its id tells (`app/ids.py`) as
# well as the day from the operation's row: the planner keeps the window's days (two or
# three, every day for a v4 id), and the run reads the operation's one. A taken key's read
# hands the day from its key's row to `transitions_on_day` (migration 0034), which plans
# the read with it as a value.
_HISTORY = """,
    (SELECT coalesce(json_agg(json_build_object(
                'id', t.id, 'from_state', t.from_state, 'to_state', t.to_state,
                'trigger', t.trigger, 'actor', t.actor, 'reason', t.reason, 'fence', t.fence,
                'created_at', t.created_at) ORDER BY t.id), '[]'::json)
     FROM {trail})
"""
_TRAIL = "operation_transitions t WHERE t.operation_id = operations.id"
_FROM_ROW = "operations.created_at"
_HISTORY_BY_ID = _HISTORY.format(
    trail=f"{_TRAIL} AND t.operation_created_at = {_FROM_ROW}"
    f" AND {within('t.operation_created_at', 'id')}"
)
_HISTORY_ON_DAY = _HISTORY.format(trail=f"{_TRAIL} AND t.operation_created_at = %(created_at)s")
_HISTORY_OF_ROW = _HISTORY.format(
    trail="transitions_on_day(operations.id, operations.created_at) t"
)
# The key's row (`idempotency_keys`, the claim's decider): the operation it names, by id and
# `created_at`.
KEY_ROW = """
    SELECT operation_id, operation_created_at FROM idempotency_keys
    WHERE tenant_id = %(tenant_id)s AND operation_name = %(operation_name)s
      AND idempotency_key = %(idempotency_key)s
"""
# A taken key's operation, in the statement that reads its key's row: the row's id and day
# are handed to `operation_on_day` (migration 0034), a PL/pgSQL function whose read is
# planned with them as values, so the planner keeps the one partition of that day. Joined
# to the key's row directly, the day would prune only when the statement ran, and every
# day kept would be planned on every replay (bench/partition_reads.py: 81-268 ms of planning
# with a year kept).
_KEYED = """
    FROM ({key_row}) AS k
    CROSS JOIN LATERAL operation_on_day(k.operation_id, %(tenant_id)s, k.operation_created_at)
        AS operations
"""
_BY_ID = f" WHERE id = %(id)s AND {within('created_at', 'id')}"
_BY_ID_FOR_TENANT = _BY_ID + " AND tenant_id = %(tenant_id)s"
# An owner's reads name the operation's day, as its writes do (`OwnedRef`): one partition.
# (The exact day, so no window of the id's time is needed.)
_BY_REF = " WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND created_at = %(created_at)s"
_OWNED = "SELECT state, attempts FROM operations" + _BY_REF + " AND fence = %(fence)s"
_TRACEPARENT = "SELECT traceparent FROM operations" + _BY_REF


def links_column(*, on_day: bool = True) -> str:
    """The links' column: read on the operation's day (`links_on_day`), or, `on_day` False
    (a schema before migration 0035), through the view on every day."""
    return LINKS_COLUMN if on_day else LINKS_OF_EVERY_DAY


def _select(
    where: str,
    *,
    with_history: bool,
    history: str = _HISTORY_BY_ID,
    links_on_day: bool = True,
    source: str = "FROM operations",
) -> str:
    """The read of an operation, with its links and history when asked (`history`: bounded
    by the window of its id, by its day as a parameter, or for a key's row)."""
    extra = f", {links_column(on_day=links_on_day)} {history}" if with_history else ""
    return f"SELECT {SNAPSHOT_COLUMNS} {extra} {source} {where}"


def history_by_id_sql(*, links_on_day: bool = True) -> str:
    """The read of an operation by id and tenant with its history, as `get_snapshot` runs
    it (the plan tests read it)."""
    return _select(_BY_ID_FOR_TENANT, with_history=True, links_on_day=links_on_day)


def owned_snapshot_sql(*, links_on_day: bool = True) -> str:
    """The read of the operation an owner's reference names, with its history, as
    `owned_snapshot` runs it (the plan tests read it)."""
    return snapshot_on_day_sql(with_history=True, links_on_day=links_on_day)


def keyed_snapshot_sql(*, with_history: bool = False, links_on_day: bool = True) -> str:
    """The read of the operation a key's row names, with its history when asked, in one
    statement: the key's row (`KEY_ROW`), then the operation and its history on the day the
    row names, each planned in that day's partition (`_KEYED`). The claim's statement
    carries it for a taken key; `find_by_key` runs it."""
    keyed = _KEYED.format(key_row=KEY_ROW)
    return _select(
        "",
        with_history=with_history,
        history=_HISTORY_OF_ROW,
        links_on_day=links_on_day,
        source=keyed,
    )


# Whether a connection's database has migration 0034's functions. A process of this release
# may run on a schema before it (migration 0033 stops on a large database until
# `payments partitions convert` has run, docs/scaling.md): there a taken key's operation is
# read by a second statement on the day its key's row names. Asked once per connection, so
# a connection opened before the migration keeps the second statement until the pool
# replaces it.
_HAS_ON_DAY = """
    SELECT to_regprocedure('operation_on_day(uuid, uuid, timestamptz)') IS NOT NULL
       AND to_regprocedure('transitions_on_day(uuid, timestamptz)') IS NOT NULL
"""
# Whether it has migration 0035's `links_on_day`, asked the same way, once per connection.
_HAS_LINKS_ON_DAY = "SELECT to_regprocedure('links_on_day(uuid, timestamptz)') IS NOT NULL"
_capabilities: WeakKeyDictionary[Connection, dict[str, bool]] = WeakKeyDictionary()


async def _has(conn: Connection, sql: str) -> bool:
    known = _capabilities.setdefault(conn, {})
    if sql not in known:
        row = await (await conn.execute(sql)).fetchone()
        known[sql] = bool(row and row[0])
    return known[sql]


async def reads_on_day(conn: Connection) -> bool:
    """Whether `conn` reads a taken key's operation in the statement that reads its key's
    row (`keyed_snapshot_sql`), or by a second statement (`snapshot_on_day`)."""
    return await _has(conn, _HAS_ON_DAY)


async def reads_links_on_day(conn: Connection) -> bool:
    """Whether `conn` reads an operation's links on its day (`links_on_day`), or through the
    view on every day of `payments` (a schema before migration 0035)."""
    return await _has(conn, _HAS_LINKS_ON_DAY)


async def find_by_key(
    conn: Connection,
    *,
    tenant_id: uuid.UUID,
    operation_name: str,
    idempotency_key: str,
    key_ttl_s: int,
    with_history: bool = False,
) -> Snapshot | None:
    """The tenant's operation with this key, if any (with its history, when asked): the one
    the key's row names, until the key is released. One statement (`keyed_snapshot_sql`);
    two before migration 0034 (the key's row, then the operation on its day)."""
    params = {
        "tenant_id": tenant_id,
        "operation_name": operation_name,
        "idempotency_key": idempotency_key,
        "key_ttl_s": key_ttl_s,
    }
    if await reads_on_day(conn):
        links_on_day = with_history and await reads_links_on_day(conn)
        sql = keyed_snapshot_sql(with_history=with_history, links_on_day=links_on_day)
        return await _snapshot(conn, sql, params, with_history=with_history)
    row = await (await conn.execute(KEY_ROW, params)).fetchone()
    if row is None:
        return None
    operation_id, created_at = row
    return await snapshot_on_day(
        conn,
        operation_id,
        tenant_id=tenant_id,
        created_at=created_at,
        key_ttl_s=key_ttl_s,
        with_history=with_history,
    )


async def get_snapshot(
    conn: Connection,
    operation_id: uuid.UUID,
    *,
    key_ttl_s: int,
    tenant_id: uuid.UUID | None = None,
    with_history: bool = False,
) -> Snapshot | None:
    """The operation by id; scoped to `tenant_id` when given (with its history, when asked)."""
    params: dict[str, Any] = {"id": operation_id, "tenant_id": tenant_id, "key_ttl_s": key_ttl_s}
    params |= created_window(operation_id).params("id")
    where = _BY_ID if tenant_id is None else _BY_ID_FOR_TENANT
    links_on_day = with_history and await reads_links_on_day(conn)
    sql = _select(where, with_history=with_history, links_on_day=links_on_day)
    return await _snapshot(conn, sql, params, with_history=with_history)


def snapshot_on_day_sql(*, with_history: bool = False, links_on_day: bool = True) -> str:
    """The read of an operation on its day, as `snapshot_on_day` runs it (the plan tests and
    bench/partition_reads.py read it)."""
    return _select(
        _BY_REF, with_history=with_history, history=_HISTORY_ON_DAY, links_on_day=links_on_day
    )


async def snapshot_on_day(
    conn: Connection,
    operation_id: uuid.UUID,
    *,
    tenant_id: uuid.UUID,
    created_at: datetime,
    key_ttl_s: int,
    with_history: bool = False,
) -> Snapshot | None:
    """The operation by its id, tenant and day (its `created_at`), with its history when
    asked: one partition of `operations`, and of the audit trail."""
    params = {"id": operation_id, "tenant_id": tenant_id, "created_at": created_at}
    links_on_day = with_history and await reads_links_on_day(conn)
    sql = snapshot_on_day_sql(with_history=with_history, links_on_day=links_on_day)
    return await _snapshot(conn, sql, params | {"key_ttl_s": key_ttl_s}, with_history=with_history)


async def owned_snapshot(
    conn: Connection, ref: OwnedRef, *, key_ttl_s: int, with_history: bool = False
) -> Snapshot | None:
    """The operation `ref` names, by its id, tenant and day, whoever holds it now (with its
    history, when asked): what its owner answers with once its own work is done."""
    return await snapshot_on_day(
        conn,
        ref.id,
        tenant_id=ref.tenant_id,
        created_at=ref.created_at,
        key_ttl_s=key_ttl_s,
        with_history=with_history,
    )


async def owned(conn: Connection, ref: OwnedRef) -> OwnedRef | None:
    """The operation's current state and attempts, if `ref`'s fence still holds it."""
    params = {"id": ref.id, "tenant_id": ref.tenant_id, "created_at": ref.created_at}
    row = await (await conn.execute(_OWNED, params | {"fence": ref.fence})).fetchone()
    if row is None:
        return None
    return replace(ref, state=State(row[0]), attempts=int(row[1]))


def snapshot_of(row: Sequence[Any], *, with_links: bool = False) -> Snapshot:
    """A `Snapshot` from a row of `SNAPSHOT_COLUMNS` (and the links, `with_links`)."""
    if with_links:
        *columns, lease_live, key_expired, links = row
        operation = replace(OperationRow(*columns), links=links)
    else:
        *columns, lease_live, key_expired = row
        operation = OperationRow(*columns)
    return Snapshot(operation, bool(lease_live), bool(key_expired))


async def _snapshot(
    conn: Connection, sql: str, params: dict[str, Any], *, with_history: bool
) -> Snapshot | None:
    row = await (await conn.execute(sql, params)).fetchone()
    if row is None:
        return None
    if not with_history:
        return snapshot_of(row)
    *columns, lease_live, key_expired, links, history = row
    return Snapshot(
        replace(OperationRow(*columns), links=links),
        bool(lease_live),
        bool(key_expired),
        tuple(_transition(t) for t in history),
    )


def _transition(item: dict[str, Any]) -> TransitionRow:
    return TransitionRow(
        id=int(item["id"]),
        from_state=item["from_state"],
        to_state=item["to_state"],
        trigger=item["trigger"],
        actor=item["actor"],
        reason=item["reason"],
        fence=int(item["fence"]),
        created_at=datetime.fromisoformat(item["created_at"]),
    )


async def stored_traceparent(conn: Connection, ref: OwnedRef) -> str | None:
    """The W3C traceparent stored by the claim of the operation `ref` names; None if that
    request was not traced (read only when tracing is on: docs/tracing.md)."""
    params = {"id": ref.id, "tenant_id": ref.tenant_id, "created_at": ref.created_at}
    row = await (await conn.execute(_TRACEPARENT, params)).fetchone()
    return None if row is None else row[0]
