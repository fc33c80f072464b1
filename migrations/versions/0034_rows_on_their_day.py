"""An operation and its audit trail read on a day given as a value, from one statement

A taken key's row (`idempotency_keys`) names its operation's id and day (`created_at`). A
statement that reads the key's row and joins the operation to it knows that day only when
it runs: the planner keeps every day's partition of `operations` (and of the audit trail),
and prunes them at run time, on every call (docs/scaling.md, "The key table").

Two functions read one day's rows with the day as a value:

- `operation_on_day(id, tenant_id, created_at)`: the operation, as `SETOF operations`;
- `transitions_on_day(operation_id, operation_created_at)`: its audit rows, as
  `SETOF operation_transitions`.

Each is PL/pgSQL, whose statements are planned with the arguments' values (a custom plan),
so the day prunes at planning and one partition is planned; `plan_cache_mode` is
`force_custom_plan` on them, so the plan cache never switches to a generic plan of every
day after its fifth call (in the default mode it plans that generic plan once, at the sixth
call on a connection, to weigh it: 30-40 ms with 38 partitions, more as the days grow,
and then keeps to custom plans). They are STABLE: they read in the calling statement's snapshot
and are never inlined. A statement calls them with the key's row's values (the claim,
`app/operations/reads.py`), so the key's row and its operation are one round trip.

The functions name the tables without a schema, as the service's statements do: the
caller's search path finds them.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-28 01:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATION_ON_DAY = """
    CREATE OR REPLACE FUNCTION operation_on_day(
        p_id uuid, p_tenant_id uuid, p_created_at timestamptz
    ) RETURNS SETOF operations
    LANGUAGE plpgsql STABLE ROWS 1
    SET plan_cache_mode = force_custom_plan
    AS $$
    BEGIN
        RETURN QUERY
            SELECT * FROM operations
            WHERE id = p_id AND tenant_id = p_tenant_id AND created_at = p_created_at;
    END
    $$
"""
TRANSITIONS_ON_DAY = """
    CREATE OR REPLACE FUNCTION transitions_on_day(
        p_operation_id uuid, p_operation_created_at timestamptz
    ) RETURNS SETOF operation_transitions
    LANGUAGE plpgsql STABLE ROWS 10
    SET plan_cache_mode = force_custom_plan
    AS $$
    BEGIN
        RETURN QUERY
            SELECT * FROM operation_transitions
            WHERE operation_id = p_operation_id
              AND operation_created_at = p_operation_created_at;
    END
    $$
"""
FUNCTIONS = (
    ("operation_on_day", "uuid, uuid, timestamptz", OPERATION_ON_DAY),
    ("transitions_on_day", "uuid, timestamptz", TRANSITIONS_ON_DAY),
)


def upgrade() -> None:
    for _name, _arguments, function in FUNCTIONS:
        op.execute(function)


def downgrade() -> None:
    for name, arguments, _function in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {name}({arguments})")
