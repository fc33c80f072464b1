"""An operation's links read on its day, as a value

`operation_links` (one branch per kind's table, migrations 0021-0022) says what an
operation acts on. Its payments' branch is read by `payments.operation_id`, which is not
the table's partition key: every read of an operation's links planned and probed every day
of `payments`. With 30 days kept, the worker's read of an operation it has just reconciled
took 1.98 ms against 0.29 ms on a fresh database (pg_stat_statements, 2 million payments),
and its drain ran at half the fresh rate (docs/benchmark.md, "A big, old database").

The view gains `operation_created_at`: the operation's day where the branch's table is
partitioned by it (`payments`, whose `created_at` is its operation's), NULL where the table
is not partitioned (`refunds`, `payment_modifications`). A kind whose table is partitioned
by its operation's day names that column in its branch; any other kind gives NULL.

`links_on_day(operation_id, operation_created_at)` reads the links with the day as a value
(PL/pgSQL, custom plans only, as migration 0034's functions): first the branches that carry
a day, on that day (one partition of `payments`; the NULL branches fold away at planning),
then, when none matched, the branches without one (the payments' branch prunes to nothing:
its `created_at` is never NULL, and no range partition holds NULL).

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-28 05:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BRANCHES = """
        SELECT operation_id, tenant_id, jsonb_build_object('payment_id', id) AS links{payments}
        FROM payments
        UNION ALL
        SELECT operation_id, tenant_id,
               jsonb_build_object('payment_id', payment_id, 'refund_id', id) AS links{other}
        FROM refunds
        UNION ALL
        SELECT operation_id, tenant_id,
               jsonb_build_object('payment_id', payment_id, type || '_id', id) AS links{other}
        FROM payment_modifications
"""
VIEW_WITH_DAY = "CREATE OR REPLACE VIEW operation_links AS" + _BRANCHES.format(
    payments=",\n               created_at AS operation_created_at",
    other=",\n               NULL::timestamptz AS operation_created_at",
)
VIEW_WITHOUT_DAY = "CREATE VIEW operation_links AS" + _BRANCHES.format(payments="", other="")
LINKS_ON_DAY = """
    CREATE OR REPLACE FUNCTION links_on_day(
        p_operation_id uuid, p_operation_created_at timestamptz
    ) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode = force_custom_plan
    AS $$
    DECLARE
        found jsonb;
    BEGIN
        SELECT l.links INTO found FROM operation_links l
        WHERE l.operation_id = p_operation_id
          AND l.operation_created_at = p_operation_created_at;
        IF found IS NULL THEN
            SELECT l.links INTO found FROM operation_links l
            WHERE l.operation_id = p_operation_id AND l.operation_created_at IS NULL;
        END IF;
        RETURN found;
    END
    $$
"""


def upgrade() -> None:
    op.execute(VIEW_WITH_DAY)
    op.execute(LINKS_ON_DAY)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS links_on_day(uuid, timestamptz)")
    op.execute("DROP VIEW operation_links")
    op.execute(VIEW_WITHOUT_DAY)
