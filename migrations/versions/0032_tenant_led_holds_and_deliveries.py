"""The hold expiry's and the webhook claim's indexes lead with tenant_id

The worker's expiry of lapsed holds (`app/authorizations/expiry.py`) and the webhook
deliveries' claim (`app/webhooks/deliveries.py`) claim one tenant at a time, as the
recovery's claim does (migration 0028, `app/jobs/tenants.py`): on Citus a statement that
locks rows must route to one shard group, and `tenant_id` is the distribution column
(docs/scaling.md). Their indexes lead with tenant_id (same names, same partial
predicates), so that each tenant's claim reads a range of its own and which tenants have due
work is a loose scan of the same index, one probe per tenant (per endpoint, for the
deliveries):

- `ix_payments_open_holds`: (tenant_id, capture_before), open holds only;
- `ix_webhook_deliveries_endpoint_due`: (tenant_id, endpoint_id, next_attempt_at, id),
  pending deliveries only.

A plain CREATE INDEX blocks writes to the table while it scans it: on a large table build
each by hand first, under another name, and swap it in:

    CREATE INDEX CONCURRENTLY ix_payments_open_holds_new ON payments
        (tenant_id, capture_before) WHERE status IN ('AUTHORIZED', 'PARTIALLY_CAPTURED');
    DROP INDEX CONCURRENTLY ix_payments_open_holds;
    ALTER INDEX ix_payments_open_holds_new RENAME TO ix_payments_open_holds;

(and `ix_webhook_deliveries_endpoint_due` on `webhook_deliveries (tenant_id, endpoint_id,
next_attempt_at, id) WHERE status = 'pending'`): the upgrade leaves an index that already
leads with tenant_id as it is.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-27 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (name, table, columns by tenant, columns before, partial predicate).
INDEXES = (
    (
        "ix_payments_open_holds",
        "payments",
        "tenant_id, capture_before",
        "capture_before",
        "status IN ('AUTHORIZED', 'PARTIALLY_CAPTURED')",
    ),
    (
        "ix_webhook_deliveries_endpoint_due",
        "webhook_deliveries",
        "tenant_id, endpoint_id, next_attempt_at, id",
        "endpoint_id, next_attempt_at, id",
        "status = 'pending'",
    ),
)
LEADS_WITH_TENANT = """
    SELECT EXISTS (
        SELECT FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
        WHERE i.relname = :name AND a.attname = 'tenant_id')
"""


def upgrade() -> None:
    bind = op.get_bind()
    for name, table, by_tenant, _before, where in INDEXES:
        if bind.execute(sa.text(LEADS_WITH_TENANT), {"name": name}).scalar_one():
            continue
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON {table} ({by_tenant}) WHERE {where}")


def downgrade() -> None:
    for name, table, _by_tenant, before, where in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON {table} ({before}) WHERE {where}")
