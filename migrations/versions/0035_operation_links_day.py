"""The `operation_links` view gives each row's partition day

`operation_links` (one branch per kind's table: payments, refunds, payment modifications)
read by an operation's id probed every day's partition of `payments`: the view held no
column a reader could bound the day by. It now gives `operation_created_at`, the day the
row is partitioned by where its table is (a payment's `created_at`, its operation's:
written by the operation's claim, in the same statement), and NULL where the table is not
partitioned (refunds, captures and voids: one probe of their unique `operation_id` index).
A reader bounds it as `(l.operation_created_at IS NULL OR <bound>)`: the planner keeps the
payments' partitions the bound meets, and each other branch whole (docs/scaling.md, "What
prunes and what does not").

The downgrade makes the view again as 0022 left it (a view cannot lose a column in place).

Revision ID: 0035
Revises: 0033
Create Date: 2026-11-28 01:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BRANCHES = (
    (
        "jsonb_build_object('payment_id', id)",
        "payments",
        "created_at",
    ),
    (
        "jsonb_build_object('payment_id', payment_id, 'refund_id', id)",
        "refunds",
        "NULL::timestamptz",
    ),
    (
        "jsonb_build_object('payment_id', payment_id, type || '_id', id)",
        "payment_modifications",
        "NULL::timestamptz",
    ),
)


def _view(*, with_day: bool) -> str:
    branches = [
        f"SELECT operation_id, tenant_id, {links} AS links"
        + (f", {day} AS operation_created_at" if with_day else "")
        + f" FROM {table}"
        for links, table, day in _BRANCHES
    ]
    return "CREATE VIEW operation_links AS " + " UNION ALL ".join(branches)


def upgrade() -> None:
    op.execute("DROP VIEW operation_links")
    op.execute(_view(with_day=True))


def downgrade() -> None:
    op.execute("DROP VIEW operation_links")
    op.execute(_view(with_day=False))
