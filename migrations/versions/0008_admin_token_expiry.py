"""Admin tokens expire: `admin_tokens.expires_at`, 30 days from now for the tokens already out

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Tokens issued before expiry existed get the default lifetime from today: they keep
    # working for 30 days, long enough to issue their operators new ones. The table holds a
    # handful of rows, so adding, filling and constraining the column is instant.
    op.add_column("admin_tokens", sa.Column("expires_at", sa.DateTime(timezone=True)))
    op.execute("UPDATE admin_tokens SET expires_at = now() + interval '30 days'")
    op.alter_column("admin_tokens", "expires_at", nullable=False)


def downgrade() -> None:
    op.drop_column("admin_tokens", "expires_at")
