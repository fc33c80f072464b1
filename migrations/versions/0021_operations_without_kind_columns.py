"""A kind-independent operations record: each kind's table points at its operation

`operations.payment_id` (the payment an operation creates or refunds) and
`operations.refund_id` (the refund a refund's operation creates) named two kinds in the
record every kind shares. Each kind's own table already points at its operation
(`payments.operation_id`, `refunds.operation_id`, both unique and NOT NULL, written by the
claim's one statement), so the columns held nothing the kinds' tables do not: the upgrade
checks that for every row, then drops them. What the operation's reads show of its
business object (`payment_id`, `refund_id`) comes from the `operation_links` view, one
branch per kind's table; a new kind's migration adds its branch.

The check refuses to drop anything a kind's table does not hold: an operation whose
payment or refund row is missing, or names other ids, stops the upgrade with the count,
and nothing is changed.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 09:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each kind's table contributes its operations' links; UNION ALL keeps the branches apart,
# so a read of one operation's links probes each table's unique operation_id index once.
LINKS_VIEW = """
    CREATE VIEW operation_links AS
        SELECT operation_id, tenant_id, jsonb_build_object('payment_id', id) AS links
        FROM payments
        UNION ALL
        SELECT operation_id, tenant_id,
               jsonb_build_object('payment_id', payment_id, 'refund_id', id) AS links
        FROM refunds
"""

# Operations whose ids the kinds' tables do not hold as they stand in the operations row.
UNMATCHED = """
    SELECT count(*) FROM operations o
    WHERE NOT (
        (o.operation_name = 'create_payment' AND o.refund_id IS NULL AND EXISTS (
            SELECT FROM payments p WHERE p.operation_id = o.id AND p.id = o.payment_id))
        OR (o.operation_name = 'create_refund' AND EXISTS (
            SELECT FROM refunds r WHERE r.operation_id = o.id AND r.id = o.refund_id
                                    AND r.payment_id = o.payment_id))
    )
"""


def upgrade() -> None:
    unmatched = op.get_bind().execute(sa.text(UNMATCHED)).scalar_one()
    if unmatched:
        raise RuntimeError(
            f"{unmatched} operations name a payment or refund that its kind's table does not"
            " hold for them; nothing was changed (docs/operations.md, 'The operations record')"
        )
    op.execute(LINKS_VIEW)
    op.drop_constraint(op.f("uq_operations_refund_id"), "operations", type_="unique")
    op.drop_column("operations", "refund_id")
    op.drop_column("operations", "payment_id")


def downgrade() -> None:
    op.add_column("operations", sa.Column("payment_id", sa.UUID(), nullable=True))
    op.add_column("operations", sa.Column("refund_id", sa.UUID(), nullable=True))
    op.execute(
        "UPDATE operations o SET payment_id = p.id FROM payments p WHERE p.operation_id = o.id"
    )
    op.execute(
        "UPDATE operations o SET payment_id = r.payment_id, refund_id = r.id"
        " FROM refunds r WHERE r.operation_id = o.id"
    )
    op.alter_column("operations", "payment_id", nullable=False)
    op.create_unique_constraint(op.f("uq_operations_refund_id"), "operations", ["refund_id"])
    op.execute("DROP VIEW operation_links")
