"""The provider of each settled line, and lines unique per provider

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 03:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A line was keyed by the provider's record id alone: with several providers, one's
    # `ch_...` is no promise against another's, and a second provider's line under an id the
    # first had used was silently not stored (ON CONFLICT DO NOTHING), its fee and net lost.
    op.execute("ALTER TABLE settlement_lines ADD COLUMN provider text")
    # The lines stored so far: a refund's is at the provider holding its charge; a charge's
    # at the provider of the attempt its key names (`payment-<id>` is attempt 0,
    # `payment-<id>:<n>` attempt n, route[n + 1] in SQL); anything else (an orphan, a line
    # from before several providers) at `primary`, the one provider there was.
    op.execute(
        """
        UPDATE settlement_lines AS line SET provider = COALESCE(
            (SELECT refund.provider FROM refunds AS refund WHERE refund.id = line.refund_id),
            (SELECT payment.route[
                    CASE WHEN line.provider_key ~ ':[1-9][0-9]{0,3}$'
                         THEN substring(line.provider_key FROM ':([0-9]+)$')::int + 1
                         ELSE 1 END]
               FROM payments AS payment
              WHERE payment.id = line.payment_id AND line.refund_id IS NULL),
            'primary')
        """
    )
    op.execute("ALTER TABLE settlement_lines ALTER COLUMN provider SET NOT NULL")
    op.execute("ALTER TABLE settlement_lines DROP CONSTRAINT pk_settlement_lines")
    op.execute(
        "ALTER TABLE settlement_lines ADD CONSTRAINT pk_settlement_lines"
        " PRIMARY KEY (provider, provider_id)"
    )


def downgrade() -> None:
    # Fails, changing nothing, while two providers have a line under one record id: which to
    # keep is an operator's call.
    op.execute("ALTER TABLE settlement_lines DROP CONSTRAINT pk_settlement_lines")
    op.execute(
        "ALTER TABLE settlement_lines ADD CONSTRAINT pk_settlement_lines PRIMARY KEY (provider_id)"
    )
    op.execute("ALTER TABLE settlement_lines DROP COLUMN provider")
