"""`python -m bench.history_seed`: a big, old database, written in SQL.

N payments over D days into a database at the head migration, as the service would have
left them: each payment with its operation, the operation's three transitions (RECEIVED
and PROVIDER_REQUEST_SENT by the claim, then COMPLETED or FAILED by the outcome) and its
event, over a few tenants, oldest first, `created_at` evenly over the D days up to the
seeding's start. The rows are made by PostgreSQL itself, `INSERT ... SELECT` over
`generate_series` in chunks of `--chunk` payments (one transaction each): measured on
200,000 payments against text `COPY ... FROM STDIN` of rows made in Python by the
service's own functions, it took 84 s where COPY took 101 s (docs/benchmark.md, "A big,
old database"). The values are the service's all the same: the fingerprint of the body a
replay sends (`request_body`), the stored answers and the events' payment JSON byte for
byte as `app/payments/replies.py` and `payment_json` render them (compared with them by
`tests/bench/test_history_seed.py`), the provider key derived from the payment's id.

Outcomes, one payment in fifty of each kind:

    46 in 50   succeeded    operation COMPLETED, answer 201, payment.succeeded
     3 in 50   declined     operation COMPLETED, answer 402, payment.declined
     1 in 50   rejected     operation FAILED, answer 502, payment.failed

Keys age as the worker's expiry leaves them (`app/idempotency/expiry.py`), counted from
the completion, with the settings' TTLs (`PAYMENTS_KEY_TTL_S`, one day, and
`PAYMENTS_TOMBSTONE_TTL_S`, 30 days): younger than the key TTL the answer is stored and a
replay gets it; older, a tombstone (answer dropped, `response_expired_at` set); older than
the tombstone TTL, the key released (`idempotency_key` NULL, `key_released_at` set).

How it loads (`bench/history_load.py`): the tables' primary keys, unique constraints,
secondary indexes and foreign keys (theirs and those naming them) are dropped first, and
the key table's claim trigger disabled where the layout has one; the chunks are inserted on
`--jobs` connections at once (2); then everything is put back from its own definition
(`pg_get_indexdef`, `pg_get_constraintdef`), which checks every row against each
constraint, so a row that breaks one fails the seeding. CHECKs stay on throughout. Then
VACUUM (ANALYZE) and a CHECKPOINT. It prints each phase's time, the rows a second, the
checkpoints the insert caused (raise the server's `max_wal_size` for a big seeding:
docs/benchmark.md) and the disk used, in all and per table with its indexes.

Layouts: the columns other layouts add are filled when they exist (information_schema,
read once): `operation_created_at` on operation_transitions and events (the operation's
`created_at`), and the `idempotency_keys` table (one row per key not released, naming its
operation's `created_at`). The key rows are inserted before their operations: on a layout
between migrations 0029 and 0033 the `BEFORE INSERT` trigger on `operations` then finds
each key's row and leaves it (0033 drops it). A partitioned table (`operations` and
`payments` by their `created_at`, the history by its operation's) is loaded through its
parent, and the seeded days get
partitions of their own first: the legacy partition, which on a fresh database holds
everything before today and nothing yet, is narrowed to end where the seeding begins
(it must be empty), and the calendar (`app/partitions/calendar.py`, `create_ahead`)
makes each day's partition from the seeding's first day on, as the worker makes them.

    .venv/bin/python -m bench.history_seed DATABASE_URL --payments 200000 --days 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from app.errors import PROBLEM_JSON
from app.idempotency.replies import JSON
from app.ids import id_sql
from app.operations.repository import CLAIM_TRIGGER, SEND_REASON
from app.operations.values import OperationName
from app.partitions.calendar import create_ahead
from app.partitions.layout import PARTITIONED, PartitionedTable, day_bounds
from app.payments.schemas import CreatePaymentCommand
from app.provider.registry import DEFAULT_NAME
from app.settings import Settings
from bench.history_load import clear_the_way, insert_chunks, put_back
from bench.machine import load_average
from bench.scenarios import payment_amount, payment_body

TENANTS = 4
ACCOUNTS = 64  # payment_body's accounts: acc_bench_0 .. acc_bench_63
CHUNK = 50_000
# Connections inserting at once, and building indexes at once: one a core here.
JOBS = 2
KEY_PREFIX = "hist"
# The tables a payment writes, in the order they are loaded (each references operations).
TABLES = ("operations", "payments", "operation_transitions", "events")
IDEMPOTENCY_KEYS = "idempotency_keys"
DECLINE_CODE = "card_declined"
REJECTED_DETAIL = "invalid account"
OPERATION = OperationName.CREATE_PAYMENT.value
# The settings' TTLs (the service's defaults), which the seeding ages the keys by.
KEY_TTL_S = int(Settings.model_fields["key_ttl_s"].default)
TOMBSTONE_TTL_S = int(Settings.model_fields["tombstone_ttl_s"].default)
_HISTORY_COLUMN = "operation_created_at"
_KEY_COLUMNS = ("tenant_id", "operation_name", "idempotency_key", "operation_id")


def key_of(index: int) -> str:
    """The idempotency key of seeded payment `index`."""
    return f"{KEY_PREFIX}-{index:010d}"


def request_body(index: int) -> bytes:
    """The body of seeded payment `index`'s request, as a replay sends it again."""
    return payment_body(index, KEY_PREFIX)


def outcome_of(index: int) -> str:
    """`succeeded`, `declined` or `rejected` (module docstring: 46, 3 and 1 in 50)."""
    slot = index % 50
    if slot == 49:
        return "rejected"
    return "declined" if slot in (7, 23, 41) else "succeeded"


def command_of(index: int) -> CreatePaymentCommand:
    """The canonical command of `request_body(index)`: what its fingerprint is over."""
    return CreatePaymentCommand(
        amount_minor=payment_amount(index),
        currency="EUR",
        account_id=f"acc_bench_{index % ACCOUNTS}",
        merchant_reference=f"{KEY_PREFIX}-{index}",
        description=None,
    )


@dataclass(frozen=True)
class Layout:
    """What the database's schema holds beyond today's layout."""

    # Of operation_transitions and events, those with an `operation_created_at` column.
    history_created_at: frozenset[str] = frozenset()
    # The idempotency_keys table's columns, or () when the table does not exist.
    idempotency_keys: tuple[str, ...] = ()
    # Tables among the loaded ones that are partitioned.
    partitioned: tuple[str, ...] = ()

    @property
    def tables(self) -> tuple[str, ...]:
        return TABLES + ((IDEMPOTENCY_KEYS,) if self.idempotency_keys else ())


def inspect_layout(conn: psycopg.Connection[Any]) -> Layout:
    """Read the layout once from information_schema and pg_partitioned_table."""
    columns = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = ANY(%s)",
        ([*TABLES, IDEMPOTENCY_KEYS],),
    ).fetchall()
    keys = tuple(column for table, column in columns if table == IDEMPOTENCY_KEYS)
    if keys:
        missing = [c for c in (*_KEY_COLUMNS, _HISTORY_COLUMN) if c not in keys]
        if missing:
            raise SystemExit(f"idempotency_keys lacks the columns {missing}: a layout unknown here")
    partitioned = conn.execute(
        "SELECT c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid"
        " WHERE c.relname = ANY(%s) AND c.relnamespace = current_schema()::regnamespace"
        " ORDER BY 1",
        ([*TABLES, IDEMPOTENCY_KEYS],),
    ).fetchall()
    return Layout(
        history_created_at=frozenset(
            table
            for table, column in columns
            if column == _HISTORY_COLUMN and table in ("operation_transitions", "events")
        ),
        idempotency_keys=keys,
        partitioned=tuple(name for (name,) in partitioned),
    )


@dataclass(frozen=True)
class Plan:
    """What to seed: `payments` over `days` days up to `now`, into `tenants`."""

    payments: int
    days: float
    tenants: tuple[uuid.UUID, ...]
    now: datetime
    key_ttl_s: int = KEY_TTL_S
    tombstone_ttl_s: int = TOMBSTONE_TTL_S

    def created_at(self, index: int) -> datetime:
        """Evenly over the days, oldest first; the newest a moment before `now`."""
        span_s = self.days * 86_400
        return self.now - timedelta(seconds=span_s * (self.payments - index) / self.payments)

    def key_state(self, completed: datetime) -> str:
        """`replayable`, `tombstone` or `released`, by the completion's age at `now`."""
        age_s = (self.now - completed).total_seconds()
        if age_s < self.key_ttl_s:
            return "replayable"
        return "tombstone" if age_s < self.tombstone_ttl_s else "released"


def _iso(column: str) -> str:
    """`app.clock.iso` in SQL: RFC 3339 UTC with microseconds."""
    return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""


# Payment g of the chunk, with every value its rows share (`outcome_of`, `command_of`,
# `key_of`, `Plan.created_at`, `Plan.key_state` in SQL). The ids are UUIDv7s of the
# payment's time, as the service makes them (`app/ids.py`), their random bits md5s of the
# run's tag: a read by id finds its row within the window its id tells.
_PAYMENT = f"""
WITH s AS (
    SELECT g,
           {id_sql("created", "md5(%(tag)s || 'op' || g)")} AS op,
           {id_sql("created", "md5(%(tag)s || 'pay' || g)")} AS pay,
           (%(tenants)s::uuid[])[1 + g %% cardinality(%(tenants)s::uuid[])] AS tenant,
           created,
           CASE WHEN g %% 50 = 49 THEN 'rejected'
                WHEN g %% 50 IN (7, 23, 41) THEN 'declined' ELSE 'succeeded' END AS outcome,
           100 + (g * 7919) %% 99900 AS amount,
           'acc_bench_' || (g %% {ACCOUNTS}) AS account,
           '{KEY_PREFIX}-' || g AS reference,
           '{KEY_PREFIX}-' || lpad(g::text, 10, '0') AS key
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
         LATERAL (SELECT %(now)s::timestamptz
                         - make_interval(secs => %(span_s)s * (%(payments)s - g)::float8
                                                 / %(payments)s) AS created) AS c
), t AS (
    SELECT s.*,
           created + make_interval(secs => (40 + (g %% 11) * 13) / 1000.0) AS completed,
           (amount / 100) || '.' || lpad((amount %% 100)::text, 2, '0') AS amount_text,
           CASE outcome WHEN 'succeeded' THEN 'SUCCEEDED' WHEN 'declined' THEN 'DECLINED'
                        ELSE 'FAILED' END AS status,
           CASE WHEN outcome <> 'rejected' THEN 'ch_' || replace(pay::text, '-', '') END
             AS charge_id,
           CASE WHEN outcome = 'declined' THEN '{DECLINE_CODE}' END AS decline_code
    FROM s
), p AS (
    SELECT t.*,
           CASE WHEN %(now)s::timestamptz - completed < make_interval(secs => %(key_ttl_s)s)
                  THEN 'replayable'
                WHEN %(now)s::timestamptz - completed
                     < make_interval(secs => %(tombstone_ttl_s)s) THEN 'tombstone'
                ELSE 'released' END AS key_state,
           -- payment_json as dump_json writes it: compact, in its order.
           '{{"payment_id":"' || pay || '","operation_id":"' || op || '","status":"' || status
           || '","amount":"' || amount_text
           || '","currency":"EUR","amount_refunded":"0.00","capture":"automatic"'
           || ',"amount_captured":"'
           || CASE WHEN outcome = 'succeeded' THEN amount_text ELSE '0.00' END
           || '","amount_capturable":"0.00","capture_before":null,"account_id":"' || account
           || '","merchant_reference":"' || reference
           || '","description":null,"metadata":{{}},"provider_charge_id":'
           || coalesce('"' || charge_id || '"', 'null')
           || ',"decline_code":' || coalesce('"' || decline_code || '"', 'null')
           || ',"created_at":"' || {_iso("created")} || '","updated_at":"'
           || {_iso("completed")} || '"}}' AS payment_json
    FROM t
)
"""

_OPERATIONS = (
    _PAYMENT
    + f"""
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        fence, attempts, response_status, response_headers, response_body,
                        created_at, updated_at, completed_at, response_expired_at,
                        key_released_at)
SELECT op, tenant, '{OPERATION}', CASE WHEN key_state <> 'released' THEN key END,
       -- app.idempotency.fingerprint over command_of(g).canonical()
       encode(sha256(convert_to(
           '{{"command":{{"account_id":"' || account || '","amount_minor":' || amount
           || ',"currency":"EUR","description":null,"merchant_reference":"' || reference
           || '","metadata":{{}}}},"operation":"{OPERATION}","v":1}}', 'UTF8')), 'hex'),
       CASE WHEN outcome = 'rejected' THEN 'FAILED' ELSE 'COMPLETED' END, 1, 0,
       CASE outcome WHEN 'succeeded' THEN 201 WHEN 'declined' THEN 402 ELSE 502 END,
       CASE WHEN key_state <> 'replayable' THEN NULL
            WHEN outcome = 'succeeded'
              THEN jsonb_build_object('content-type', '{JSON}', 'location', '/payments/' || pay)
            ELSE jsonb_build_object('content-type', '{PROBLEM_JSON}') END,
       CASE WHEN key_state <> 'replayable' THEN NULL
            WHEN outcome = 'succeeded' THEN payment_json
            -- the problems of app/payments/replies.py, as problem_body orders them
            WHEN outcome = 'declined'
              THEN '{{"type":"/problems/card-declined","title":"Payment declined","status":402,'
                   || '"code":"{DECLINE_CODE}","detail":"the provider declined the payment '
                   || '({DECLINE_CODE})","payment_id":"' || pay || '","operation_id":"' || op
                   || '"}}'
            ELSE '{{"type":"/problems/provider-rejected","title":"Provider rejected the payment",'
                 || '"status":502,"code":"PROVIDER_REJECTED","detail":"the provider rejected the '
                 || 'request; nothing was charged: {REJECTED_DETAIL}","payment_id":"' || pay
                 || '","operation_id":"' || op || '"}}' END,
       created,
       CASE key_state WHEN 'replayable' THEN completed
                      WHEN 'tombstone' THEN completed + make_interval(secs => %(key_ttl_s)s)
                      ELSE completed + make_interval(secs => %(tombstone_ttl_s)s) END,
       completed,
       CASE WHEN key_state <> 'replayable'
            THEN completed + make_interval(secs => %(key_ttl_s)s) END,
       CASE WHEN key_state = 'released'
            THEN completed + make_interval(secs => %(tombstone_ttl_s)s) END
FROM p
"""
)

_PAYMENTS = (
    _PAYMENT
    + f"""
INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status, amount_minor,
                      currency, account_id, merchant_reference, metadata, provider_charge_id,
                      decline_code, created_at, updated_at)
SELECT pay, tenant, op, 'payment-' || pay, ARRAY['{DEFAULT_NAME}'], status, amount, 'EUR',
       account, reference, '{{}}', charge_id, decline_code, created, completed
FROM p
"""
)

# The claim's two edges and the outcome's, as app/operations/statements.py audits them.
_TRANSITIONS = f"""
INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state, trigger,
                                   actor, reason, fence, created_at{{history}})
SELECT op, tenant, e.from_state,
       coalesce(e.to_state, CASE WHEN outcome = 'rejected' THEN 'FAILED' ELSE 'COMPLETED' END),
       coalesce(e.trigger, CASE WHEN outcome = 'rejected' THEN 'fail' ELSE 'complete' END),
       'api:' || left(replace(op::text, '-', ''), 12),
       coalesce(e.reason, CASE WHEN outcome = 'rejected'
                               THEN 'provider rejected the request: {REJECTED_DETAIL}'
                               ELSE 'provider answered: ' || outcome END),
       1, CASE WHEN e.step = 3 THEN completed ELSE created END{{history_value}}
FROM p,
     (VALUES (1, NULL, 'RECEIVED', '{CLAIM_TRIGGER}', 'request received'),
             (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'send', '{SEND_REASON}'),
             (3, 'PROVIDER_REQUEST_SENT', NULL, NULL, NULL))
     AS e (step, from_state, to_state, trigger, reason)
ORDER BY g, e.step
"""

_EVENTS = """
INSERT INTO events (id, tenant_id, type, operation_id, data, created_at{history})
SELECT md5(%(tag)s || 'evt' || g)::uuid, tenant, 'payment.' || lower(status), op,
       payment_json::jsonb, completed{history_value}
FROM p
"""

_KEYS = f"""
INSERT INTO {IDEMPOTENCY_KEYS} ({", ".join(_KEY_COLUMNS)}, {_HISTORY_COLUMN})
SELECT tenant, '{OPERATION}', key, op, created FROM p WHERE key_state <> 'released'
"""


def statements(layout: Layout) -> list[str]:
    """The chunk's statements, in order, with the columns the layout has."""

    def history(table: str, sql: str) -> str:
        there = table in layout.history_created_at
        return sql.format(
            history=f", {_HISTORY_COLUMN}" if there else "",
            history_value=", created" if there else "",
        )

    # The key rows first: the claim trigger of `operations` then finds each one there.
    chunk = [_PAYMENT + _KEYS] if layout.idempotency_keys else []
    chunk += [
        _OPERATIONS,
        _PAYMENTS,
        _PAYMENT + history("operation_transitions", _TRANSITIONS),
        _PAYMENT + history("events", _EVENTS),
    ]
    return chunk


def _narrow_legacy(conn: psycopg.Connection[Any], table: PartitionedTable, first: date) -> None:
    """`table`'s legacy partition made to end at `first` (it must be empty)."""
    row = conn.execute(
        "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass"
        " AND c.relname = %s",
        (table.table, table.legacy),
    ).fetchone()
    if row is None:
        return
    if conn.execute(f'SELECT EXISTS (SELECT FROM "{table.legacy}")').fetchone() != (False,):
        raise SystemExit(f"{table.legacy} holds rows: the seeding wants a fresh database")
    end = day_bounds(first)[0]
    with conn.transaction():
        conn.execute(f'ALTER TABLE "{table.table}" DETACH PARTITION "{table.legacy}"')
        conn.execute(
            f'ALTER TABLE "{table.table}" ATTACH PARTITION "{table.legacy}"'
            f" FOR VALUES FROM (MINVALUE) TO ('{end.isoformat()}')"
        )


async def _make_days(url: str, tables: list[PartitionedTable], first: date, last: date) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for table in tables:
            await create_ahead(conn, table, premake_days=(last - first).days, today=first)


def make_day_partitions(
    conn: psycopg.Connection[Any], url: str, layout: Layout, first: date, last: date
) -> None:
    """Each partitioned table given a partition of each day from `first` to
    `last` (module docstring, "Layouts")."""
    tables = [table for table in PARTITIONED if table.table in layout.partitioned]
    for table in tables:
        _narrow_legacy(conn, table, first)
    asyncio.run(_make_days(url, tables, first, last))


def sizes(conn: psycopg.Connection[Any], tables: tuple[str, ...]) -> dict[str, Any]:
    """pg_database_size, and per table (its partitions summed) the heap, TOAST included,
    and the indexes, in MiB."""
    per_table: dict[str, dict[str, float]] = {}
    for table in tables:
        row = conn.execute(
            "SELECT sum(pg_table_size(r))::bigint, sum(pg_indexes_size(r))::bigint FROM"
            " (SELECT %s::regclass AS r UNION SELECT relid FROM pg_partition_tree(%s)) AS t",
            (table, table),
        ).fetchone()
        assert row is not None
        per_table[table] = {
            "table_mib": round(row[0] / 2**20, 1),
            "indexes_mib": round(row[1] / 2**20, 1),
            "total_mib": round((row[0] + row[1]) / 2**20, 1),
        }
    total = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert total is not None
    return {"database_mib": round(total[0] / 2**20, 1), "tables": per_table}


def _checkpoints(conn: psycopg.Connection[Any]) -> int:
    """Checkpoints the server has made so far, timed and requested (a load that fills
    `max_wal_size` requests one, and writes every page it touches again after it).
    PostgreSQL 17 counts them in pg_stat_checkpointer, earlier ones in pg_stat_bgwriter."""
    row = conn.execute(
        "SELECT to_regclass('pg_catalog.pg_stat_checkpointer') IS NOT NULL"
    ).fetchone()
    assert row is not None
    sql = (
        "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
        if row[0]
        else "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
    )
    row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def _setting(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def _log(message: str) -> None:
    print(f"history_seed: {message}", file=sys.stderr, flush=True)


def make_tenants(conn: psycopg.Connection[Any], count: int, created: datetime) -> list[uuid.UUID]:
    tenants = [uuid.uuid4() for _ in range(count)]
    with conn.transaction():
        for n, tenant in enumerate(tenants):
            conn.execute(
                "INSERT INTO tenants (id, name, created_at) VALUES (%s, %s, %s)",
                (tenant, f"history-{n}", created),
            )
    return tenants


def seed(
    database_url: str,
    *,
    payments: int,
    days: float,
    tenants: int = TENANTS,
    chunk: int = CHUNK,
    jobs: int = JOBS,
    progress: bool = False,
) -> dict[str, Any]:
    """Seed `payments` payments over `days` days; return the figures (phases, rates, disk)."""
    started = time.perf_counter()
    now = datetime.now(UTC)
    with psycopg.connect(database_url, autocommit=True) as conn:
        layout = inspect_layout(conn)
        _log(f"layout: {layout}")
        empty = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert empty is not None
        max_wal_size = _setting(conn, "max_wal_size")
        plan = Plan(
            payments=payments,
            days=days,
            tenants=tuple(make_tenants(conn, tenants, now - timedelta(days=days + 1))),
            now=now,
        )
        if layout.partitioned:
            first_day = plan.created_at(0).astimezone(UTC).date()
            make_day_partitions(conn, database_url, layout, first_day, now.date())
            _log(f"day partitions from {first_day} on")
        dropped = clear_the_way(conn, layout.tables)
        chunk_sql = statements(layout)
        params: dict[str, Any] = {
            "tag": uuid.uuid4().hex,
            "tenants": list(plan.tenants),
            "now": now,
            "span_s": days * 86_400,
            "payments": payments,
            "key_ttl_s": plan.key_ttl_s,
            "tombstone_ttl_s": plan.tombstone_ttl_s,
        }
        checkpoints_before = _checkpoints(conn)
        loading = time.perf_counter()
        retried = insert_chunks(
            database_url,
            chunk_sql,
            params,
            payments=payments,
            chunk=chunk,
            jobs=jobs,
            progress=progress,
        )
        loaded = time.perf_counter()
        checkpoints = _checkpoints(conn) - checkpoints_before
        _log(f"inserted on {jobs} connections in {loaded - loading:.1f} s "
             f"({checkpoints} checkpoints, {retried} chunks retried)")  # fmt: skip
        rebuilt_s = put_back(database_url, dropped, jobs=jobs)
        indexed = time.perf_counter()
        _log(f"rebuilt {len(rebuilt_s)} constraints and indexes in "
             f"{indexed - loaded:.1f} s")  # fmt: skip
        conn.execute(f"VACUUM (ANALYZE) {', '.join(layout.tables)}")
        vacuumed = time.perf_counter()
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")
        checkpointed = time.perf_counter()
        disk = sizes(conn, layout.tables)
        counts: dict[str, int] = dict(
            conn.execute(
                "SELECT CASE WHEN key_released_at IS NOT NULL THEN 'released'"
                " WHEN response_expired_at IS NOT NULL THEN 'tombstone' ELSE 'replayable' END,"
                " count(*) FROM operations WHERE tenant_id = ANY(%s) GROUP BY 1",
                (list(plan.tenants),),
            ).fetchall()
        )
    rows = payments * (6 + (1 if layout.idempotency_keys else 0))
    load_s, total_s = loaded - loading, checkpointed - started
    return {
        "payments": payments,
        "days": days,
        "tenants": [str(t) for t in plan.tenants],
        "seeded_at": now.isoformat(),
        "layout": {
            "history_created_at": sorted(layout.history_created_at),
            "idempotency_keys": bool(layout.idempotency_keys),
            "partitioned": list(layout.partitioned),
        },
        "key_states": counts,
        "rows": rows,
        "phases_s": {
            "insert": round(load_s, 1),
            "index_and_key_builds": round(indexed - loaded, 1),
            "vacuum_analyze": round(vacuumed - indexed, 1),
            "checkpoint": round(checkpointed - vacuumed, 1),
            "total": round(total_s, 1),
        },
        "rebuilt_s": rebuilt_s,
        "jobs": jobs,
        "load_checkpoints": checkpoints,
        "max_wal_size": max_wal_size,
        "chunks_retried": retried,
        "insert_rows_per_s": round(rows / load_s),
        "payments_per_s": round(payments / total_s),
        "disk": disk,
        "database_mib_before": round(empty[0] / 2**20, 1),
    }


def estimate(figures: dict[str, Any], payments: int) -> dict[str, float]:
    """Seeding `payments` from a measured seeding, scaled linearly: time (minutes) and disk
    (GiB), and the disk per million payments. Index builds sort, so a bigger seeding takes
    somewhat longer than this."""
    scale = payments / figures["payments"]
    before = figures["database_mib_before"]
    grown = figures["disk"]["database_mib"] - before
    return {
        "payments": payments,
        "minutes": round(figures["phases_s"]["total"] * scale / 60, 1),
        "disk_gib": round((before + grown * scale) / 1024, 1),
        "disk_gib_per_million": round(grown * 1_000_000 / figures["payments"] / 1024, 2),
    }


def report(figures: dict[str, Any]) -> str:
    """The figures as lines to print."""
    phases = figures["phases_s"]
    disk = figures["disk"]
    lines = [
        f"{figures['payments']:,} payments over {figures['days']:g} days "
        f"({figures['rows']:,} rows; keys {figures['key_states']})",
        f"INSERT {phases['insert']} s ({figures['insert_rows_per_s']:,} rows/s), indexes and "
        f"constraints {phases['index_and_key_builds']} s, VACUUM ANALYZE "
        f"{phases['vacuum_analyze']} s, CHECKPOINT {phases['checkpoint']} s; total "
        f"{phases['total']} s ({figures['payments_per_s']:,} payments/s)",
        f"on {figures['jobs']} connections; {figures['load_checkpoints']} checkpoints during "
        f"the insert (max_wal_size {figures['max_wal_size']}); "
        f"{figures['chunks_retried']} chunks retried",
        f"disk: database {disk['database_mib']:,.1f} MiB",
    ]
    for table, size in disk["tables"].items():
        lines.append(
            f"  {table}: {size['total_mib']:,.1f} MiB ({size['table_mib']:,.1f} table, "
            f"{size['indexes_mib']:,.1f} indexes)"
        )
    if "load_average" in figures:
        lines.append(f"load average before {figures['load_average']['before']}, "
                     f"after {figures['load_average']['after']}")  # fmt: skip
    return "\n".join(lines)


def _rounded(values: tuple[float, ...]) -> list[float]:
    return [round(v, 2) for v in values]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.history_seed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("database_url", help="a database at the head migration")
    parser.add_argument("--payments", type=int, required=True)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--tenants", type=int, default=TENANTS)
    parser.add_argument("--chunk", type=int, default=CHUNK)
    parser.add_argument(
        "--jobs", type=int, default=JOBS, help="connections inserting and building at once (2)"
    )
    parser.add_argument(
        "--estimate-for",
        type=int,
        default=20_000_000,
        metavar="N",
        help="print the time and disk N payments would take, from this seeding's figures",
    )
    args = parser.parse_args(argv)
    before = _rounded(load_average())
    figures = seed(
        args.database_url,
        payments=args.payments,
        days=args.days,
        tenants=args.tenants,
        chunk=args.chunk,
        jobs=args.jobs,
        progress=True,
    )
    figures["load_average"] = {"before": before, "after": _rounded(load_average())}
    figures["estimate"] = estimate(figures, args.estimate_for)
    print(report(figures))
    guess = figures["estimate"]
    print(
        f"estimate for {guess['payments']:,} payments: {guess['minutes']:,.0f} minutes, "
        f"{guess['disk_gib']:,.1f} GiB ({guess['disk_gib_per_million']} GiB per million)"
    )
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
