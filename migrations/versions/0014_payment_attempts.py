"""A payment's route across providers, and the attempt it is at

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 23:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Every payment made before routing went to the one provider, which the registry calls
    # `primary` when PAYMENTS_PROVIDERS is unset: its route is that provider alone, and its
    # only attempt is attempt 0 (its key unchanged). A constant default is kept in the
    # catalogue, not written into each row (PostgreSQL 11+), so this is instant on a big
    # table; the claim writes both columns from now on, so the default is dropped after.
    op.execute("ALTER TABLE payments ADD COLUMN route text[] NOT NULL DEFAULT '{primary}'")
    op.execute("ALTER TABLE payments ALTER COLUMN route DROP DEFAULT")
    op.execute("ALTER TABLE payments ADD COLUMN attempt smallint NOT NULL DEFAULT 0")
    op.execute(
        "ALTER TABLE payments ADD CONSTRAINT ck_payments_attempt_on_route"
        " CHECK (attempt >= 0 AND attempt < cardinality(route)) NOT VALID"
    )
    # A refund goes to the provider holding its payment's charge; every refund so far went
    # to the one provider.
    op.execute("ALTER TABLE refunds ADD COLUMN provider text NOT NULL DEFAULT 'primary'")
    op.execute("ALTER TABLE refunds ALTER COLUMN provider DROP DEFAULT")
    # Validated apart: the scan holds no lock that stops writes (SHARE UPDATE EXCLUSIVE).
    op.execute("ALTER TABLE payments VALIDATE CONSTRAINT ck_payments_attempt_on_route")


def downgrade() -> None:
    op.execute("ALTER TABLE refunds DROP COLUMN IF EXISTS provider")
    op.execute("ALTER TABLE payments DROP CONSTRAINT IF EXISTS ck_payments_attempt_on_route")
    op.execute("ALTER TABLE payments DROP COLUMN IF EXISTS attempt")
    op.execute("ALTER TABLE payments DROP COLUMN IF EXISTS route")
