"""A payment's failovers as facts: payment_failovers, one row per failover transition

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 06:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The failover reasons the charge driver wrote until now, the only record of a failover's
# providers and cause: `failover: <from> (attempt <n>) <why>; attempt <n+1> at <to>`, the
# why one of three sentences. A reason matching none of them (edited by hand) is not copied.
_REASON = (
    r"^failover: ([a-z][a-z0-9_-]*) \(attempt ([0-9]+)\) (.*); "
    r"attempt [0-9]+ at ([a-z][a-z0-9_-]*)$"
)
_DECLINED = r"^declined (\S+), retryable elsewhere$"
_NOT_PROCESSED = r"^did not process the only send \((.*)\)$"
_HELD_BACK = "held back by its circuit breaker"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE payment_failovers (
            tenant_id uuid NOT NULL,
            transition_id bigint NOT NULL,
            payment_id uuid NOT NULL,
            from_attempt smallint NOT NULL,
            from_provider text NOT NULL,
            to_provider text NOT NULL,
            cause text NOT NULL,
            detail text,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT pk_payment_failovers PRIMARY KEY (tenant_id, transition_id),
            CONSTRAINT fk_payment_failovers_tenant_id_tenants
                FOREIGN KEY (tenant_id) REFERENCES tenants (id),
            CONSTRAINT fk_payment_failovers_transition_id_operation_transitions
                FOREIGN KEY (transition_id) REFERENCES operation_transitions (id)
                ON DELETE CASCADE,
            CONSTRAINT fk_payment_failovers_payment_id_payments
                FOREIGN KEY (payment_id) REFERENCES payments (id) ON DELETE CASCADE,
            CONSTRAINT ck_payment_failovers_cause_known
                CHECK (cause IN ('declined', 'not_processed', 'circuit_open')),
            CONSTRAINT ck_payment_failovers_from_attempt_on_route CHECK (from_attempt >= 0),
            CONSTRAINT uq_payment_failovers_tenant_id_payment_id_from_attempt
                UNIQUE (tenant_id, payment_id, from_attempt)
        )
        """
    )
    op.execute("CREATE INDEX ix_payment_failovers_created_at ON payment_failovers (created_at)")
    # The failovers so far, read from their reasons once (through 0016's partial index).
    op.execute(
        f"""
        INSERT INTO payment_failovers (tenant_id, transition_id, payment_id, from_attempt,
                                       from_provider, to_provider, cause, detail, created_at)
        SELECT tenant_id, id, payment_id, from_attempt, from_provider, to_provider, cause,
               detail, created_at
        FROM (
            SELECT p.tenant_id, t.id, p.id AS payment_id, m[2]::smallint AS from_attempt,
                   m[1] AS from_provider, m[4] AS to_provider, t.created_at,
                   CASE WHEN m[3] ~ '{_DECLINED}' THEN 'declined'
                        WHEN m[3] ~ '{_NOT_PROCESSED}' THEN 'not_processed'
                        WHEN m[3] = '{_HELD_BACK}' THEN 'circuit_open' END AS cause,
                   coalesce(substring(m[3] FROM '{_DECLINED}'),
                            substring(m[3] FROM '{_NOT_PROCESSED}')) AS detail
            FROM operation_transitions AS t
            JOIN payments AS p ON p.operation_id = t.operation_id,
                 regexp_match(t.reason, '{_REASON}') AS m
            WHERE t.trigger = 'failover'
        ) AS read
        WHERE cause IS NOT NULL
        ON CONFLICT DO NOTHING
        """
    )
    # Nothing reads failovers from the audit trail any more.
    op.execute("DROP INDEX IF EXISTS ix_operation_transitions_failover")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_operation_transitions_failover"
        " ON operation_transitions (created_at) WHERE trigger = 'failover'"
    )
    op.execute("DROP TABLE payment_failovers")
