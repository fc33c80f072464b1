"""Events published to a broker: event_publications, event_publication_cursors

Where each tenant's feed has been published to an exchange, one row per tenant and
exchange, written by the workers that publish (`app/events/publication.py`). The outcome's
statement is unchanged: `events` gains no column and no index, so writing an event costs
what it did, and a deployment without a broker has two empty tables. New tables: no stored
row changes, and nothing else waits while they are made.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27 14:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE event_publications (
            exchange varchar(255) NOT NULL,
            start_txid bigint NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_event_publications PRIMARY KEY (exchange)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE event_publication_cursors (
            tenant_id uuid NOT NULL,
            exchange varchar(255) NOT NULL,
            after_txid bigint NOT NULL,
            after_seq bigint NOT NULL,
            attempts integer NOT NULL DEFAULT 0,
            next_attempt_at timestamptz NOT NULL DEFAULT now(),
            last_error text,
            lease_owner varchar(128),
            lease_expires_at timestamptz,
            fence bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_event_publication_cursors PRIMARY KEY (tenant_id, exchange),
            CONSTRAINT fk_event_publication_cursors_tenant_id_tenants
                FOREIGN KEY (tenant_id) REFERENCES tenants (id),
            CONSTRAINT fk_event_publication_cursors_exchange_event_publications
                FOREIGN KEY (exchange) REFERENCES event_publications (exchange)
                ON DELETE CASCADE
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE event_publication_cursors")
    op.execute("DROP TABLE event_publications")
