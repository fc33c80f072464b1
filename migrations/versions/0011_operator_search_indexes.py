"""The operators' search: an index for each key a support request names

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (name, table, columns, predicate). An operator searches across tenants, so none of them
# leads with tenant_id (tests/db/test_tenant_keys.py lists each, with its reason). The ids
# (operations, payments, refunds, events) are primary keys and need nothing.
INDEXES = (
    ("ix_operations_idempotency_key", "operations", "idempotency_key",
     "idempotency_key IS NOT NULL"),
    ("ix_payments_provider_charge_id", "payments", "provider_charge_id",
     "provider_charge_id IS NOT NULL"),
    ("ix_payments_merchant_reference", "payments", "merchant_reference",
     "merchant_reference IS NOT NULL"),
    ("ix_payments_account_created", "payments", "account_id, created_at, id", None),
    ("ix_refunds_provider_refund_id", "refunds", "provider_refund_id",
     "provider_refund_id IS NOT NULL"),
)  # fmt: skip


def upgrade() -> None:
    # A plain CREATE INDEX blocks writes to its table while it runs: on a large table,
    # create each CONCURRENTLY by hand first (same name and definition); IF NOT EXISTS then
    # skips it (docs/operators.md).
    for name, table, columns, predicate in INDEXES:
        where = f" WHERE {predicate}" if predicate else ""
        op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({columns}){where}")


def downgrade() -> None:
    for name, *_ in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
