"""A partitioned `operation_transitions` of the catalogue's shape, in a schema of the test's
own, and far-off days of its own, so tests running side by side never meet.

The catalogue's entry (`app/partitions/layout.py`) is used as it is: the schema comes first
on the test's connections' search path, so the table's name finds the test's table, and
`operations` the test's own too (a plain table of the same columns: the rules of
`holds.py` read it, and the database's own is partitioned by day, with no partition for
the far-off days), while the settlement tables are the test database's own. Its days are
in the next century, each test's a stretch of its own: no other test makes an operation
on them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TypeVar
from urllib.parse import quote

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from app.db.database import Connection
from app.partitions.layout import OPERATION_TRANSITIONS

T = TypeVar("T")
TABLE = OPERATION_TRANSITIONS


@dataclass
class Scratch:
    """The test's schema, its first day, and the rows it made outside its schema."""

    database_url: str
    schema: str
    base: date
    operations: list[uuid.UUID]
    items: list[uuid.UUID]
    days: list[date]

    @property
    def options(self) -> str:
        return f"-c search_path={self.schema},public -c timezone=UTC"

    @property
    def url(self) -> str:
        """DATABASE_URL with the schema first on the search path (for the commands)."""
        joiner = "&" if "?" in self.database_url else "?"
        return f"{self.database_url}{joiner}options={quote(self.options)}"

    def day(self, offset: int) -> date:
        return self.base + timedelta(days=offset)

    def sync(self) -> psycopg.Connection[DictRow]:
        return psycopg.connect(
            self.database_url, autocommit=True, row_factory=dict_row, options=self.options
        )

    def run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """`work` on an autocommit connection of the application's kind, to its end."""

        async def go() -> T:
            conn = await psycopg.AsyncConnection.connect(
                self.database_url,
                autocommit=True,
                options=self.options,
                application_name=self.schema,
            )
            async with conn:
                return await work(conn)

        return asyncio.run(go())

    def partitions(self) -> list[str]:
        with self.sync() as conn:
            rows = conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname",
                (TABLE.table,),
            ).fetchall()
        return [row["relname"] for row in rows]

    def table_exists(self, name: str) -> bool:
        with self.sync() as conn:
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL AS found", (f"{self.schema}.{name}",)
            ).fetchone()
        assert row is not None
        return bool(row["found"])

    def operation(self, day: date, state: str, *, tenant_id: uuid.UUID) -> uuid.UUID:
        """An operation created at noon of `day` (UTC), in `state`."""
        operation_id = uuid.uuid4()
        created = datetime.combine(day, time(12), tzinfo=UTC)
        final = state in ("COMPLETED", "FAILED")
        with self.sync() as conn:
            conn.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, idempotency_key,"
                " fingerprint, state, created_at, updated_at, completed_at)"
                " VALUES (%s, %s, 'create_payment', %s, %s, %s, %s, %s, %s)",
                (
                    operation_id,
                    tenant_id,
                    f"partitions-{operation_id}",
                    "0" * 64,
                    state,
                    created,
                    created,
                    created if final else None,
                ),
            )
        self.operations.append(operation_id)
        return operation_id

    def settled(self, day: date) -> None:
        """A finished settlement run of `day`."""
        with self.sync() as conn:
            conn.execute(
                "INSERT INTO settlement_days (day, last_started_at, last_finished_at)"
                " VALUES (%s, now(), now())"
                " ON CONFLICT (day) DO UPDATE SET last_finished_at = now()",
                (day,),
            )
        self.days.append(day)

    def transition(self, operation_id: uuid.UUID, day: date, tenant_id: uuid.UUID) -> None:
        """A row of the audit trail on `day` (the operation's creation day)."""
        created = datetime.combine(day, time(12), tzinfo=UTC)
        with self.sync() as conn:
            conn.execute(
                "INSERT INTO operation_transitions (operation_id, tenant_id, from_state,"
                " to_state, trigger, actor, reason, fence, created_at, operation_created_at)"
                " VALUES (%s, %s, 'RECEIVED', 'COMPLETED', 'complete', 'test, \"quoted\"',"
                " %s, 1, %s, %s)",
                (operation_id, tenant_id, "a reason\nover two lines", created, created),
            )


@pytest.fixture
def scratch(database_url: str) -> Iterator[Scratch]:
    schema = f"cal_{uuid.uuid4().hex[:10]}"
    # Each test its own 2000 days in the next century.
    base = date(2101, 1, 1) + timedelta(days=2000 * (uuid.uuid4().int % 900))
    made = Scratch(database_url, schema, base, [], [], [])
    with psycopg.connect(database_url, autocommit=True) as conn:
        has_column = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'public'"
            " AND table_name = %s AND column_name = %s",
            (TABLE.table, TABLE.column),
        ).fetchone()
        extra = "" if has_column else f", {TABLE.column} timestamptz NOT NULL"
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.{TABLE.table} (LIKE public.{TABLE.table}"
            f" INCLUDING DEFAULTS{extra}) PARTITION BY RANGE ({TABLE.column})"
        )
        conn.execute(
            f"CREATE TABLE {schema}.operations (LIKE public.operations INCLUDING DEFAULTS"
            " INCLUDING CONSTRAINTS INCLUDING INDEXES)"
        )
    try:
        yield made
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute("DELETE FROM reconciliation_items WHERE id = ANY(%s)", (made.items,))
            conn.execute("DELETE FROM operations WHERE id = ANY(%s)", (made.operations,))
            conn.execute("DELETE FROM settlement_days WHERE day = ANY(%s)", (made.days,))
