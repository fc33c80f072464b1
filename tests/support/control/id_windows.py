"""Rows as a read by id meets them: written before this release (a v4 id), or with a
`created_at` outside the window their id tells (`app/ids.py`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
from psycopg.rows import DictRow

from app.ids import ID_TIME_MARGIN

Db = psycopg.Connection[DictRow]


def made_before_v7_ids(db: Db, payment_id: str) -> str:
    """The payment as a row written before this release: its id a random (v4) UUID. Only
    for a payment nothing refers to yet (no refund, capture or void)."""
    legacy = uuid.uuid4()
    db.execute("UPDATE payments SET id = %s WHERE id = %s", (legacy, payment_id))
    return str(legacy)


@contextmanager
def moved_out_of_its_window(db: Db, table: str, row_id: str) -> Iterator[None]:
    """The row's `created_at` outside the window its id tells, for as long as the block
    runs (then back where it was)."""
    shift = ID_TIME_MARGIN + timedelta(hours=1)
    db.execute(f"UPDATE {table} SET created_at = created_at - %s WHERE id = %s", (shift, row_id))
    try:
        yield
    finally:
        db.execute(
            f"UPDATE {table} SET created_at = created_at + %s WHERE id = %s", (shift, row_id)
        )
