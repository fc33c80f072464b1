"""The operation's trace context: the W3C traceparent of the request that claimed it

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 16:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: adding it rewrites nothing, and an operation claimed while
    # tracing was off has none (docs/tracing.md).
    op.add_column("operations", sa.Column("traceparent", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("operations", "traceparent")
