"""Settlement runs as tests drive them: `payments settle` as a process, days of a test's own,
records moved onto them on both sides, and the items a run queued.

Every test settles a day no other test uses (`own_day`): a run reads every record made on
its day, so records are moved there, ours by an UPDATE of `created_at` and the provider's by
its ledger edit (`PATCH /_ledger/...`), before the run.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import httpx
import psycopg
from psycopg import sql
from psycopg.rows import DictRow

from app.partitions.layout import PAYMENTS, day_bounds

Db = psycopg.Connection[DictRow]
Row = dict[str, Any]

# Days far in the past, each handed out once per process (processes start at random points),
# three apart: a test may settle the day after its own too.
_DAYS = itertools.count(random.randrange(0, 11_000, 60), 3)


def own_day() -> date:
    """A UTC day in the past that no other test settles (its settlement report is out), nor
    the day after it."""
    return date(1990, 1, 1) + timedelta(days=next(_DAYS))


def at(day: date, seconds: float = 43_200) -> datetime:
    """An instant on `day`, `seconds` after its start (noon by default)."""
    return datetime.combine(day, time(), UTC) + timedelta(seconds=seconds)


def settle(
    env: Mapping[str, str], day: date, *, check: bool = True, **extra: str
) -> subprocess.CompletedProcess[str]:
    """`payments settle --date day --json` as its own process."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "settle", "--date", day.isoformat(), "--json"],
        env={**os.environ, **env, **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def summary(done: subprocess.CompletedProcess[str]) -> Row:
    """The run's summary, as `--json` printed it."""
    parsed: Row = json.loads(done.stdout)
    return parsed


def _day_of_payments(db: Db, when: datetime) -> None:
    """`payments` is partitioned by day: a day from today on gets its partition if the
    calendar has not made it yet (a day before the test database's first is the legacy
    partition's)."""
    day = when.astimezone(UTC).date()
    if day < datetime.now(UTC).date():
        return
    start, end = day_bounds(day)
    db.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF payments FOR VALUES FROM ({}) TO ({})"
        ).format(sql.Identifier(PAYMENTS.day_partition(day)), sql.Literal(start), sql.Literal(end))
    )


def move_payment(db: Db, ledger: httpx.Client, payment_id: str, when: datetime) -> None:
    """Our payment and the provider's charge under its key, both made at `when`."""
    _day_of_payments(db, when)
    row = db.execute(
        "UPDATE payments SET created_at = %s WHERE id = %s RETURNING provider_charge_id",
        (when, payment_id),
    ).fetchone()
    assert row is not None
    if row["provider_charge_id"]:
        edit(ledger, "charges", row["provider_charge_id"], created_at=when.isoformat())


def move_refund(db: Db, ledger: httpx.Client, refund_id: str, when: datetime) -> None:
    """Our refund and the provider's under its key, both made at `when`."""
    row = db.execute(
        "UPDATE refunds SET created_at = %s WHERE id = %s RETURNING provider_refund_id",
        (when, refund_id),
    ).fetchone()
    assert row is not None
    if row["provider_refund_id"]:
        edit(ledger, "refunds", row["provider_refund_id"], created_at=when.isoformat())


def edit(ledger: httpx.Client, what: str, provider_id: str, **change: Any) -> Row:
    """Overwrite members of the provider's charge or refund."""
    response = ledger.patch(f"/_ledger/{what}/{provider_id}", json=change)
    assert response.status_code == 200, response.text
    changed: Row = response.json()
    return changed


def drop(ledger: httpx.Client, what: str, provider_id: str) -> None:
    """The provider forgets a charge or refund."""
    response = ledger.delete(f"/_ledger/{what}/{provider_id}")
    assert response.status_code == 204, response.text


def add_charge(ledger: httpx.Client, key: str, when: datetime, **members: Any) -> Row:
    """A charge at the provider that no request of ours made."""
    body = {"idempotency_key": key, "amount_minor": 1000, "currency": "EUR", **members}
    response = ledger.post("/_ledger/charges", json={**body, "created_at": when.isoformat()})
    assert response.status_code == 201, response.text
    made: Row = response.json()
    return made


def items(db: Db, day: date) -> list[Row]:
    """The items first found by runs of `day`, by key and kind."""
    return db.execute(
        "SELECT * FROM reconciliation_items WHERE day = %s ORDER BY provider_key, kind", (day,)
    ).fetchall()


def by_key(db: Db, key: str) -> dict[str, Row]:
    """The items of one provider key, by kind."""
    rows = db.execute("SELECT * FROM reconciliation_items WHERE provider_key = %s", (key,))
    return {row["kind"]: row for row in rows.fetchall()}


def changes(db: Db, item_id: Any) -> list[Row]:
    """An item's audit trail, oldest first."""
    return db.execute(
        "SELECT from_state, to_state, actor, reason FROM reconciliation_item_changes"
        " WHERE item_id = %s ORDER BY id",
        (item_id,),
    ).fetchall()
